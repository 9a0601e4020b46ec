package gwmsguardprocessor

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"
)

var typeStr = component.MustNewType("gwmsguard")

// NewFactory returns the gwmsguard processor factory (traces only).
func NewFactory() processor.Factory {
	return processor.NewFactory(typeStr, createDefaultConfig,
		processor.WithTraces(createTraces, component.StabilityLevelBeta))
}

func createDefaultConfig() component.Config {
	return &Config{MaxNameLength: 128, MaxValueLength: 1024, MaxElements: 32}
}

func createTraces(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Traces) (processor.Traces, error) {
	g, err := newGuard(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	return processorhelper.NewTraces(ctx, set, cfg, next, g.processTraces,
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}))
}
