// Package gwmsguardprocessor guards pilot spans in the gwms-obs collector:
// secrets masked wherever they can hide (span, event and scope names, status
// messages, every value type), names and values cut to a length, spanmetrics
// dimensions held to bounded values, and - with per-pilot JWTs - every span
// kept inside the trace its token was issued for, under the resource identity
// (entry, client) the token names. The contrib transform and filter
// processors would do parts of this, but their module graph cannot be fetched
// from the proxy we build from (docs/tracing-backends.md), and neither reads
// the authenticated client's claims.
package gwmsguardprocessor

import (
	"errors"
	"fmt"
	"regexp"
)

// Config of the gwmsguard processor.
type Config struct {
	// RE2 patterns; every match inside any string (names, status messages,
	// attribute values at any depth, decoded bytes) becomes "****".
	BlockedValues []string `mapstructure:"blocked_values"`
	// RE2 patterns on attribute keys: the whole value becomes "****", whatever its type.
	BlockedKeyPatterns []string `mapstructure:"blocked_key_patterns"`
	// Span, event and scope names longer than this are cut (characters).
	MaxNameLength int `mapstructure:"max_name_length"`
	// String values and status messages longer than this are cut; bytes values too.
	MaxValueLength int `mapstructure:"max_value_length"`
	// Array and kvlist values keep this many elements.
	MaxElements int `mapstructure:"max_elements"`
	// Attributes that feed metric dimensions: a value outside the allowed set
	// (or not matching the pattern) becomes the replacement.
	Dimensions []DimensionConfig `mapstructure:"dimensions"`
	// Per-pilot credentials: spans must belong to the token's trace.
	PilotAuth PilotAuthConfig `mapstructure:"pilot_auth"`
}

// DimensionConfig bounds the values one attribute (resource or span) may take.
type DimensionConfig struct {
	Attribute     string   `mapstructure:"attribute"`
	AllowedValues []string `mapstructure:"allowed_values"`
	Pattern       string   `mapstructure:"pattern"` // whole value must match (RE2)
	Replacement   string   `mapstructure:"replacement"`
}

// PilotAuthConfig binds a request's spans to its authenticated token.
type PilotAuthConfig struct {
	Enabled bool `mapstructure:"enabled"`
	// Auth attribute (as the authenticator names it, e.g. "claims.gwms_trace_id")
	// holding the one trace id the token may write; AnyTrace grants every trace
	// (the factory and the exporter forwarding validated spools).
	TraceIDAttribute string `mapstructure:"trace_id_attribute"`
	AnyTrace         string `mapstructure:"any_trace"`
	// Resource attributes set from the token, overriding what the sender claims.
	ResourceFromAuth []ResourceFromAuth `mapstructure:"resource_from_auth"`
}

// ResourceFromAuth copies one auth attribute onto the resource.
type ResourceFromAuth struct {
	Attribute     string `mapstructure:"attribute"`
	AuthAttribute string `mapstructure:"auth_attribute"`
}

func (c *Config) Validate() error {
	var errs []error
	for _, p := range append(append([]string{}, c.BlockedValues...), c.BlockedKeyPatterns...) {
		if _, err := regexp.Compile(p); err != nil {
			errs = append(errs, fmt.Errorf("pattern %q: %w", p, err))
		}
	}
	if c.MaxNameLength < 1 || c.MaxValueLength < 1 || c.MaxElements < 1 {
		errs = append(errs, errors.New("max_name_length, max_value_length and max_elements must be >= 1"))
	}
	for _, d := range c.Dimensions {
		if d.Attribute == "" || d.Replacement == "" {
			errs = append(errs, errors.New("a dimension needs attribute and replacement"))
		}
		if d.Pattern != "" {
			if _, err := regexp.Compile(d.Pattern); err != nil {
				errs = append(errs, fmt.Errorf("dimension %q pattern: %w", d.Attribute, err))
			}
		}
	}
	if c.PilotAuth.Enabled && (c.PilotAuth.TraceIDAttribute == "" || c.PilotAuth.AnyTrace == "") {
		errs = append(errs, errors.New("pilot_auth needs trace_id_attribute and any_trace"))
	}
	return errors.Join(errs...)
}
