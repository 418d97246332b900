package main

import (
	"context"
	"fmt"
	"os"
	"encoding/json"

	growthbench "github.com/fencelab/fencelab/bench/growth"
	"github.com/fencelab/fencelab/core/pg"
)

func main() {
	ctx := context.Background()
	pool, err := pg.Connect(ctx, os.Args[1], pg.PoolOptions{MaxConns: 2})
	if err != nil { panic(err) }
	ps, err := growthbench.Probes(ctx, pool)
	if err != nil { panic(err) }
	for _, p := range ps {
		if len(os.Args) > 2 && p.Name != os.Args[2] { continue }
		plan, err := pg.Explain(ctx, pool, p.SQL, p.Args...)
		if err != nil { fmt.Println(p.Name, err); continue }
		fmt.Printf("%-40s %8d rows %8.1f ms (bound %d)\n", p.Name, plan.Examined, plan.Ms, p.Bound.Max(growthbench.Live))
		if len(os.Args) > 2 {
			var doc []map[string]any
			_ = json.Unmarshal([]byte(plan.Text), &doc)
			walk(doc[0]["Plan"].(map[string]any), 0)
		}
	}
}

func walk(n map[string]any, d int) {
	s := fmt.Sprintf("%*s%v rows=%v loops=%v", d*2, "", n["Node Type"], n["Actual Rows"], n["Actual Loops"])
	for _, k := range []string{"Index Name", "Relation Name", "Index Cond", "Filter", "Rows Removed by Filter", "Hash Cond", "CTE Name", "Subplan Name"} {
		if v, ok := n[k]; ok { s += fmt.Sprintf(" %s=%v", k, v) }
	}
	fmt.Println(s)
	if cs, ok := n["Plans"].([]any); ok {
		for _, c := range cs { walk(c.(map[string]any), d+1) }
	}
}
