// Package configtest loads ../testdata/config.yaml through the gwmsguard
// factory, as the opentelemetry-collector-contrib components' config tests do,
// and checks ../metadata.yaml against the factory.
package configtest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.yaml.in/yaml/v3"

	guard "github.com/gwms-obs/otelcol-gwms/gwmsguardprocessor"
)

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("..", "testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	factory := guard.NewFactory()
	defaults := factory.CreateDefaultConfig().(*guard.Config)
	tests := []struct {
		name     string
		expected *guard.Config
		err      string // a part of Validate's error; "" when valid
	}{
		{name: "", expected: defaults},
		{name: "deployed", expected: &guard.Config{
			BlockedValues: []string{
				`(?:^|[^A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`,
				`(?i)bearer\s+[A-Za-z0-9._~+/=-]+`,
				`/tmp/x509up_u[0-9]+`,
			},
			BlockedKeyPatterns: []string{`(?i).*(token|passw|passphrase|secret|credential|proxy|x509).*`},
			MaxNameLength:      128,
			MaxValueLength:     1024,
			MaxElements:        32,
			Dimensions: []guard.DimensionConfig{
				{Attribute: "gwms.phase", AllowedValues: []string{"init", "pre_setup", "setup", "main", "cleanup"},
					Replacement: "other"},
				{Attribute: "gwms.entry", Pattern: `[A-Za-z0-9_.@-]{1,128}`, Replacement: "invalid"},
			},
			PilotAuth: guard.PilotAuthConfig{
				Enabled: true, TraceIDAttribute: "claims.gwms_trace_id", AnyTrace: "*",
				ResourceFromAuth: []guard.ResourceFromAuth{
					{Attribute: "gwms.entry", AuthAttribute: "claims.gwms_entry"},
					{Attribute: "gwms.client", AuthAttribute: "claims.gwms_client"},
				},
			},
		}},
		{name: "bad_pattern", err: `pattern "(unclosed"`},
		{name: "zero_length", err: "must be >= 1"},
		{name: "dimension_without_replacement", err: "a dimension needs attribute and replacement"},
		{name: "pilot_auth_incomplete", err: "pilot_auth needs trace_id_attribute and any_trace"},
	}
	for _, tt := range tests {
		id := component.NewIDWithName(factory.Type(), tt.name)
		t.Run(id.String(), func(t *testing.T) {
			cfg := factory.CreateDefaultConfig()
			sub, err := cm.Sub(id.String())
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Unmarshal(cfg); err != nil {
				t.Fatal(err)
			}
			err = confmap.Validate(cfg)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Validate: %v, want an error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg, tt.expected) {
				t.Fatalf("loaded %+v\nwant   %+v", cfg, tt.expected)
			}
		})
	}
}

// An unknown key is refused, not ignored: a misspelt option must not silently leave a guard off.
func TestUnknownKeyRefused(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("..", "testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := cm.Sub("gwmsguard/deployed")
	if err != nil {
		t.Fatal(err)
	}
	raw := sub.ToStringMap()
	raw["blocked_value"] = []any{"x"}
	cfg := guard.NewFactory().CreateDefaultConfig()
	if err := confmapFrom(raw).Unmarshal(cfg); err == nil || !strings.Contains(err.Error(), "blocked_value") {
		t.Fatalf("Unmarshal: %v, want the unknown key named", err)
	}
}

type metadata struct {
	Type   string `yaml:"type"`
	Status struct {
		Class     string              `yaml:"class"`
		Stability map[string][]string `yaml:"stability"`
	} `yaml:"status"`
}

func TestMetadataIsTheFactorys(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "metadata.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var md metadata
	if err := yaml.Unmarshal(data, &md); err != nil {
		t.Fatal(err)
	}
	f := guard.NewFactory()
	if md.Type != f.Type().String() || md.Status.Class != "processor" {
		t.Fatalf("metadata.yaml: type %q class %q, the factory: %q processor", md.Type, md.Status.Class, f.Type())
	}
	level := strings.ToLower(f.TracesStability().String())
	if !reflect.DeepEqual(md.Status.Stability, map[string][]string{level: {"traces"}}) {
		t.Fatalf("metadata.yaml stability %v, the factory: traces %s", md.Status.Stability, level)
	}
	if f.MetricsStability() != component.StabilityLevelUndefined || f.LogsStability() != component.StabilityLevelUndefined {
		t.Fatal("the factory has signals metadata.yaml does not list")
	}
}

func confmapFrom(raw map[string]any) *confmap.Conf { return confmap.NewFromStringMap(raw) }
