package idem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// treeCanonical is the form as it was computed before canonical.go: the
// document decoded into `any` (numbers as written) and marshalled again.
// Fingerprints recorded by that version must match this one's.
func treeCanonical(b []byte) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return nil, false
	}
	out, err := json.Marshal(v)
	return out, err == nil
}

var canonicalSeeds = []string{
	`{}`, `[]`, `{"b":1,"a":2}`, `{"a":1,"a":2}`, `{"b":{"d":1,"c":[3,2,{"z":0,"y":1}]},"a":null}`,
	`{"a":1,"b":2,"a":3}`, `{"é":1,"e":2,"E":3,"\u00e9x":4}`, `{"k":"<b>&amp;</b>"}`, `{"k":"a\u2028b\u2029"}`,
	`{"k":"tab\tnl\n\"q\" \\ \/ \u0041 \ud83d\ude00"}`, "{\"k\":\"\xff\xfe bad utf-8\"}", `{"k":"\ud800 lone"}`,
	`[1,-0,0.5,1e400,-12.5E-3,1E+2,99999999999999999999999]`, `[true,false,null,"",[],{}]`,
	` { "spaced" : [ 1 , 2 ] , "x" : { } } `, `"just a string"`, `12`, `null`,
	`{"amount":30,"reason":"prize-17"}`, `{"user_id":"u","event_key":"k","template":"t","data":{"b":[1,{"d":2,"c":3}],"a":"x"}}`,
	`{"a":{"x":1,"x":{"q":2,"p":3}},"a":[5]}`, `{"\u0061":1,"a":2}`, `{"a\\b":1,"a":2,"a<":3}`,
}

// The fingerprint's canonical form is byte-identical to the decoded
// tree's, on every valid document: the seeds, and random documents of
// every shape (shuffled and duplicate keys, escapes, numbers, nesting).
func TestCanonicalFormMatchesTheDecodedTree(t *testing.T) {
	t.Parallel()
	check := func(doc string) {
		t.Helper()
		want, wantOK := treeCanonical([]byte(doc))
		got, gotOK := canonicalJSON([]byte(strings.TrimSpace(doc)))
		if !json.Valid([]byte(doc)) {
			require.False(t, gotOK, "%q is not JSON", doc)
			return
		}
		require.True(t, wantOK, "%q", doc)
		require.True(t, gotOK, "%q", doc)
		require.Equal(t, string(want), string(got), "%q", doc)
	}
	for _, s := range canonicalSeeds {
		check(s)
	}
	for _, bad := range []string{`{`, `{"a"}`, `{"a":}`, `[1,]`, `01`, `1.`, `-`, `.5`, `1e`, `tru`, `{"a":1}x`, `{} {}`, "\"a\x01b\"", `{"a":1,}`, `[1 2]`} {
		_, ok := canonicalJSON([]byte(bad))
		require.False(t, ok, "%q", bad)
	}
	rng := rand.New(rand.NewPCG(36, 1))
	for range 3000 {
		check(randomJSON(rng, 0))
	}
}

func randomJSON(rng *rand.Rand, depth int) string {
	scalars := []string{`0`, `-1`, `2.50`, `1e3`, `true`, `false`, `null`, `""`, `"a"`, `"<&>"`, `"\u00e9"`, `"\n"`, `"\ud83d\ude00"`, "\"\u2028\"", `"x\"y"`}
	keys := []string{`a`, `b`, `B`, `ab`, `é`, `\u0062`, `a<`, `z`, ``}
	switch k := rng.IntN(4); {
	case depth > 4 || k == 0:
		return scalars[rng.IntN(len(scalars))]
	case k == 1:
		var parts []string
		for range rng.IntN(5) {
			parts = append(parts, randomJSON(rng, depth+1))
		}
		return "[" + strings.Join(parts, " , ") + "]"
	default:
		var parts []string
		for range rng.IntN(6) {
			parts = append(parts, fmt.Sprintf(`"%s" : %s`, keys[rng.IntN(len(keys))], randomJSON(rng, depth+1)))
		}
		return "{ " + strings.Join(parts, ",") + " }"
	}
}

// FuzzCanonicalForm: on any input the one-pass form agrees with the tree's
// whenever the input is JSON, and refuses what is not.
func FuzzCanonicalForm(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		b = bytes.TrimSpace(b)
		got, ok := canonicalJSON(b)
		if !json.Valid(b) {
			if ok {
				t.Fatalf("accepted %q, which is not JSON", b)
			}
			return
		}
		want, wantOK := treeCanonical(b)
		if !wantOK || !ok || !bytes.Equal(want, got) {
			t.Fatalf("%q: tree %q (%v), one pass %q (%v)", b, want, wantOK, got, ok)
		}
	})
}

// Issue 36: a keyed write's fingerprint was computed on the decoded tree,
// ~30 bytes of live heap per byte of a wide body, before the handler could
// refuse the body. The one-pass form allocates about the output.
func TestCanonicalFormCostsAboutItsOutput(t *testing.T) {
	wide := []byte(`{"data":[` + strings.Repeat(`1,`, 400_000) + `1]}`)
	var keys strings.Builder
	keys.WriteString(`{`)
	for i := range 80_000 {
		if i > 0 {
			keys.WriteString(`,`)
		}
		fmt.Fprintf(&keys, `"k%d":1`, 80_000-i) // reversed: every member is moved
	}
	keys.WriteString(`}`)
	alloc := func(f func()) uint64 {
		var m0, m1 runtime.MemStats
		f() // warm
		runtime.GC()
		runtime.ReadMemStats(&m0)
		f()
		runtime.ReadMemStats(&m1)
		return m1.TotalAlloc - m0.TotalAlloc
	}
	for name, body := range map[string][]byte{"wide": wide, "many keys": []byte(keys.String())} {
		var out []byte
		n := alloc(func() { out = canonicalBody(body) })
		tree := alloc(func() { treeCanonical(body) })
		t.Logf("%s: %d bytes of body, %d allocated (the decoded tree: %d)", name, len(body), n, tree)
		// Wide: the output and nothing else (1/50 of the tree). Many keys:
		// one index entry and one key string per member besides, about
		// half the tree's.
		require.Less(t, n, uint64(16*len(body)), name)
		require.Less(t, n, tree, name)
		want, _ := treeCanonical(body)
		require.Equal(t, string(want), string(out), name)
	}
}
