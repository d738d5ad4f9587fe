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

// Images of the containers: the versions docker-compose.yml runs.
const (
	RedisImage = "redis:7.0"
	MySQLImage = "mysql:8.0"
)

// Container is a server started in a container with testcontainers-go.
type Container struct {
	// Image is the container's image, such as [RedisImage].
	Image string
	// Addr is the host:port where the server is published.
	Addr string
	// DSN reaches a MySQL container as root, no database selected; empty for
	// Redis.
	DSN string

	c testcontainers.Container
}

// Close removes the container. testcontainers-go's reaper also removes it
// when the program that started it exits, however that happens.
func (c *Container) Close(ctx context.Context) error {
	if err := c.c.Terminate(ctx); err != nil {
		return fmt.Errorf("devserver: remove %s container: %w", c.Image, err)
	}
	return nil
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
	return &Container{Image: RedisImage, Addr: strings.TrimPrefix(uri, "redis://"), c: c}, nil
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
	return &Container{Image: MySQLImage, Addr: cfg.Addr, DSN: dsn, c: c}, nil
}

// AdminDSN returns dsn with no database selected.
func AdminDSN(dsn string) (string, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("devserver: DSN %q: %w", dsn, err)
	}
	cfg.DBName = ""
	return cfg.FormatDSN(), nil
}
