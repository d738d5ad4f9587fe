//go:build !containers

// Without the containers build tag no container can be started: the
// container path's dependencies (testcontainers-go, the Docker client) stay
// out of the build.

package devserver

import "context"

// ContainersBuilt reports whether this build can start containers.
const ContainersBuilt = false

// DockerAvailable returns [ErrNoContainers]: this build cannot start
// containers.
func DockerAvailable(context.Context) error { return ErrNoContainers }

// StartRedisContainer returns [ErrNoContainers].
func StartRedisContainer(context.Context) (*Container, error) { return nil, ErrNoContainers }

// StartMySQLContainer returns [ErrNoContainers].
func StartMySQLContainer(context.Context) (*Container, error) { return nil, ErrNoContainers }
