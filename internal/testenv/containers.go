package testenv

import (
	"context"
	"time"

	"github.com/redfence/redfence/internal/devserver"
)

// dockerAvailable reports whether testcontainers-go can reach a Docker
// engine; nil means it can.
func dockerAvailable() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return devserver.DockerAvailable(ctx)
}

// startRedisContainer starts Redis in a container for the rest of the test
// process and returns its host:port. testcontainers-go's reaper removes the
// container when the process exits.
func startRedisContainer(ctx context.Context) (string, error) {
	c, err := devserver.StartRedisContainer(ctx)
	if err != nil {
		return "", err
	}
	return c.Addr, nil
}

// startMySQLContainer starts MySQL in a container for the rest of the test
// process and returns a DSN for root with no database selected, the shape of
// [DefaultMySQLDSN].
func startMySQLContainer(ctx context.Context) (string, error) {
	c, err := devserver.StartMySQLContainer(ctx)
	if err != nil {
		return "", err
	}
	return c.DSN, nil
}

// containerDSN turns a container's connection string into a DSN with no
// database selected.
func containerDSN(dsn string) (string, error) { return devserver.AdminDSN(dsn) }
