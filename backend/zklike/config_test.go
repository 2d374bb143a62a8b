package zklike

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"NoEndpoints", func(c *Config) { c.Endpoints = nil }, "Endpoints"},
		{"EmptyEndpoint", func(c *Config) { c.Endpoints = []string{" "} }, "Endpoints[0]"},
		{"PrefixSlash", func(c *Config) { c.Prefix = "locks/" }, "Prefix"},
		{"SubSecondSession", func(c *Config) { c.SessionTTL = 500 * time.Millisecond }, "SessionTTL"},
		{"NegativeTimeout", func(c *Config) { c.RequestTimeout = -time.Second }, "RequestTimeout"},
		{"DriftFactor", func(c *Config) { c.DriftFactor = 0.5 }, "DriftFactor"},
	} {
		cfg := DefaultConfig("http://127.0.0.1:2379")
		tc.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Errorf("%s: Validate() = %v, want an error naming Config.%s", tc.name, err, tc.field)
		}
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted an invalid config", tc.name)
		}
	}
	if err := DefaultConfig("http://127.0.0.1:2379").Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
	if got := ttlSeconds(500 * time.Millisecond); got != 1 {
		t.Errorf("ttlSeconds(500ms) = %d, want 1 (rounded up)", got)
	}
	if got := escapeKey("a/b%c"); got != "a%2Fb%25c" {
		t.Errorf("escapeKey = %q", got)
	}
}
