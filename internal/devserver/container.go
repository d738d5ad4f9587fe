package devserver

import (
	"context"
	"errors"
	"fmt"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/redfence/redfence/internal/redact"
)

// Images of the containers: the versions docker-compose.yml runs.
const (
	RedisImage = "redis:7.0"
	MySQLImage = "mysql:8.0"
)

// ErrNoContainers is returned by [DockerAvailable] and the container Start
// functions of a build without the containers build tag.
var ErrNoContainers = errors.New("devserver: containers are not compiled in (build or run with -tags containers, e.g. go run -tags containers ./examples/inventory)")

// Container is a server started in a container with testcontainers-go.
type Container struct {
	// Image is the container's image, such as [RedisImage].
	Image string
	// Addr is the host:port where the server is published.
	Addr string
	// DSN reaches a MySQL container as root, no database selected; empty for
	// Redis.
	DSN string

	terminate func(context.Context) error
}

// Close removes the container. testcontainers-go's reaper also removes it
// when the program that started it exits, however that happens.
func (c *Container) Close(ctx context.Context) error {
	if err := c.terminate(ctx); err != nil {
		return fmt.Errorf("devserver: remove %s container: %w", c.Image, err)
	}
	return nil
}

// AdminDSN returns dsn with no database selected.
func AdminDSN(dsn string) (string, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("devserver: DSN %q: %w", redact.DSN(dsn), err)
	}
	cfg.DBName = ""
	return cfg.FormatDSN(), nil
}
