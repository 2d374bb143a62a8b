package spec

import "testing"

func testWS(t *testing.T, s *spec, n *node) {}
