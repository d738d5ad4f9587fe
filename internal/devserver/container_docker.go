//go:build containers

// The container path, compiled in with -tags containers: testcontainers-go
// and the Docker client are a large build that most runs never use.

package devserver

import (
	"context"
	"fmt"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/testcontainers/testcontainers-go"
	tcmysql "github.com/testcontainers/testcontainers-go/modules/mysql"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// ContainersBuilt reports whether this build can start containers.
const ContainersBuilt = true

// terminate returns the Close of a testcontainers-go container.
func terminate(c testcontainers.Container) func(context.Context) error {
	return func(ctx context.Context) error { return c.Terminate(ctx) }
}

// DockerAvailable returns nil when testcontainers-go can reach a Docker
// engine (DOCKER_HOST, the default socket, or ~/.testcontainers.properties),
// or why not. ctx bounds the engine's answer. testcontainers-go panics in
// some configurations without an engine, so a panic counts as "not
// available".
func DockerAvailable(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("testcontainers-go: %v", r)
		}
	}()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return err
	}
	return p.Health(ctx) // Health closes the provider
}

// StartRedisContainer starts Redis in a container and returns once it
// answers.
func StartRedisContainer(ctx context.Context) (*Container, error) {
	c, err := tcredis.Run(ctx, RedisImage)
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return nil, fmt.Errorf("devserver: start %s: %w", RedisImage, err)
	}
	uri, err := c.ConnectionString(ctx)
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return nil, fmt.Errorf("devserver: address of %s: %w", RedisImage, err)
	}
	return &Container{Image: RedisImage, Addr: strings.TrimPrefix(uri, "redis://"), terminate: terminate(c)}, nil
}

// StartMySQLContainer starts MySQL in a container, with root's password
// empty, and returns once it answers.
func StartMySQLContainer(ctx context.Context) (*Container, error) {
	c, err := tcmysql.Run(ctx, MySQLImage, tcmysql.WithUsername("root"), tcmysql.WithPassword(""))
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return nil, fmt.Errorf("devserver: start %s: %w", MySQLImage, err)
	}
	dsn, err := c.ConnectionString(ctx)
	if err == nil {
		dsn, err = AdminDSN(dsn)
	}
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return nil, fmt.Errorf("devserver: address of %s: %w", MySQLImage, err)
	}
	cfg, _ := gomysql.ParseDSN(dsn) // AdminDSN has parsed it
	return &Container{Image: MySQLImage, Addr: cfg.Addr, DSN: dsn, terminate: terminate(c)}, nil
}
