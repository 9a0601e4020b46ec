// The gwmsguard processor's configuration test, a module of its own: the
// processor's module has no confmap dependency, and its sources are pinned by
// hash in otel-collector/builder-config.yaml (a file added there renames the
// collector binary), while nothing here is built into the collector.
module github.com/gwms-obs/otelcol-gwms/gwmsguardprocessor/configtest

go 1.26.0

require (
	github.com/gwms-obs/otelcol-gwms/gwmsguardprocessor v0.1.0
	go.opentelemetry.io/collector/component v1.68.0
	go.opentelemetry.io/collector/confmap v1.68.0
	go.yaml.in/yaml/v3 v3.0.5
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-viper/mapstructure/v2 v2.5.0 // indirect
	github.com/gobwas/glob v0.2.3 // indirect
	github.com/hashicorp/go-version v1.9.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/knadh/koanf/maps v0.1.3 // indirect
	github.com/knadh/koanf/providers/confmap v1.0.1 // indirect
	github.com/knadh/koanf/v2 v2.4.1 // indirect
	github.com/mitchellh/copystructure v1.2.0 // indirect
	github.com/mitchellh/reflectwalk v1.0.2 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee // indirect
	go.opentelemetry.io/collector/client v1.68.0 // indirect
	go.opentelemetry.io/collector/consumer v1.68.0 // indirect
	go.opentelemetry.io/collector/featuregate v1.68.0 // indirect
	go.opentelemetry.io/collector/internal/componentalias v0.162.0 // indirect
	go.opentelemetry.io/collector/pdata v1.68.0 // indirect
	go.opentelemetry.io/collector/pipeline v1.68.0 // indirect
	go.opentelemetry.io/collector/processor v1.68.0 // indirect
	go.opentelemetry.io/collector/processor/processorhelper v0.162.0 // indirect
	go.opentelemetry.io/otel v1.46.0 // indirect
	go.opentelemetry.io/otel/metric v1.46.0 // indirect
	go.opentelemetry.io/otel/trace v1.46.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
)

replace github.com/gwms-obs/otelcol-gwms/gwmsguardprocessor => ../
