package pgserver

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The provisioning order is the spec's: a given URL, then local binaries,
// then a container, then a clear error. Docker is absent here, so the
// container branch is proven by this table rather than by running one.
func TestChooseFollowsTheSpecOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  Env
		want Strategy
	}{
		{Env{URL: "postgres://x", BinDir: "/bin", DockerAnswer: true}, FromURL},
		{Env{BinDir: "/usr/lib/postgresql/15/bin", DockerAnswer: true}, Local},
		{Env{DockerAnswer: true}, Container},
	}
	for _, c := range cases {
		got, err := Choose(c.env)
		require.NoError(t, err)
		require.Equal(t, c.want, got)
	}
	_, err := Choose(Env{})
	require.ErrorIs(t, err, ErrNoPostgres)
	require.Contains(t, err.Error(), "apt-get install postgresql")
}

func TestURLCarriesDatabaseName(t *testing.T) {
	t.Parallel()
	s := &Server{Host: "127.0.0.1", Port: 5555, User: "postgres"}
	require.Equal(t, "postgres://postgres@127.0.0.1:5555/app?sslmode=disable", s.URL("app"))
	g, err := fromURL("postgres://u:p@db.example.test:6543/x?sslmode=require")
	require.NoError(t, err)
	require.Equal(t, "postgres://u:p@db.example.test:6543/other?sslmode=require", g.URL("other"))
}
