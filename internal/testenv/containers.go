package testenv

import (
	"context"
	"fmt"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/testcontainers/testcontainers-go"
	tcmysql "github.com/testcontainers/testcontainers-go/modules/mysql"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// Images of the fallback containers: the versions docker-compose.yml runs.
const (
	redisImage = "redis:7.0"
	mysqlImage = "mysql:8.0"
)

// dockerAvailable reports whether testcontainers-go can reach a Docker
// engine (DOCKER_HOST, the default socket, or ~/.testcontainers.properties).
// testcontainers-go panics in some configurations without an engine, so a
// panic counts as "not available".
func dockerAvailable() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("testcontainers-go: %v", r)
		}
	}()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return p.Health(ctx) // Health closes the provider
}

// startRedisContainer starts Redis in a container for the rest of the test
// process and returns its host:port. testcontainers-go's reaper removes the
// container when the process exits.
func startRedisContainer(ctx context.Context) (string, error) {
	c, err := tcredis.Run(ctx, redisImage)
	if err != nil {
		return "", fmt.Errorf("start %s: %w", redisImage, err)
	}
	uri, err := c.ConnectionString(ctx)
	if err != nil {
		return "", fmt.Errorf("address of %s: %w", redisImage, err)
	}
	return strings.TrimPrefix(uri, "redis://"), nil
}

// startMySQLContainer starts MySQL in a container for the rest of the test
// process and returns a DSN for root with no database selected, the shape of
// [DefaultMySQLDSN].
func startMySQLContainer(ctx context.Context) (string, error) {
	c, err := tcmysql.Run(ctx, mysqlImage, tcmysql.WithUsername("root"), tcmysql.WithPassword(""))
	if err != nil {
		return "", fmt.Errorf("start %s: %w", mysqlImage, err)
	}
	dsn, err := c.ConnectionString(ctx)
	if err != nil {
		return "", fmt.Errorf("address of %s: %w", mysqlImage, err)
	}
	return containerDSN(dsn)
}

// containerDSN turns the module's connection string into a DSN with no
// database selected.
func containerDSN(dsn string) (string, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("container DSN %q: %w", dsn, err)
	}
	cfg.DBName = ""
	return cfg.FormatDSN(), nil
}
