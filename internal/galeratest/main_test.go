package galeratest

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/redfence/redfence/internal/testenv"
)

// The cluster is started by the first test that needs it and stopped after
// the last one, pass or fail.
func TestMain(m *testing.M) { goleak.VerifyTestMain(testenv.WithGalera(m)) }
