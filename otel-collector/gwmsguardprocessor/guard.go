package gwmsguardprocessor

import (
	"context"
	"regexp"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

const (
	mask     = "****"
	maxDepth = 4 // nested array/kvlist levels kept; deeper values become a marker
)

type dimension struct {
	attr        string
	allowed     map[string]struct{}
	pattern     *regexp.Regexp
	replacement string
}

type guard struct {
	cfg       *Config
	values    []*regexp.Regexp
	keys      []*regexp.Regexp
	dims      []dimension
	logger    *zap.Logger
	dropped   metric.Int64Counter
	redacted  metric.Int64Counter
	truncated metric.Int64Counter
	bounded   metric.Int64Counter
}

// counts of one request, added to the counters once.
type tally struct {
	redacted, truncated, bounded int64
}

func newGuard(cfg *Config, set processor.Settings) (*guard, error) {
	g := &guard{cfg: cfg, logger: set.Logger}
	for _, p := range cfg.BlockedValues {
		g.values = append(g.values, regexp.MustCompile(p)) // Validate compiled them already
	}
	for _, p := range cfg.BlockedKeyPatterns {
		g.keys = append(g.keys, regexp.MustCompile(p))
	}
	for _, d := range cfg.Dimensions {
		dim := dimension{attr: d.Attribute, replacement: d.Replacement}
		if len(d.AllowedValues) > 0 {
			dim.allowed = map[string]struct{}{}
			for _, v := range d.AllowedValues {
				dim.allowed[v] = struct{}{}
			}
		}
		if d.Pattern != "" {
			dim.pattern = regexp.MustCompile("^(?:" + d.Pattern + ")$")
		}
		g.dims = append(g.dims, dim)
	}
	meter := set.MeterProvider.Meter("gwmsguardprocessor")
	var err error
	if g.dropped, err = meter.Int64Counter("otelcol_gwmsguard_dropped_spans",
		metric.WithDescription("Spans dropped by gwmsguard, by reason (foreign_trace, unauthenticated)")); err != nil {
		return nil, err
	}
	if g.redacted, err = meter.Int64Counter("otelcol_gwmsguard_redacted_values",
		metric.WithDescription("Names, messages and values in which gwmsguard masked a secret")); err != nil {
		return nil, err
	}
	if g.truncated, err = meter.Int64Counter("otelcol_gwmsguard_truncated_values",
		metric.WithDescription("Names, messages and values gwmsguard cut to the length limit")); err != nil {
		return nil, err
	}
	if g.bounded, err = meter.Int64Counter("otelcol_gwmsguard_bounded_dimensions",
		metric.WithDescription("Dimension attribute values outside their allowed set, replaced")); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *guard) processTraces(ctx context.Context, td ptrace.Traces) (ptrace.Traces, error) {
	var t tally
	want, fromAuth, ok := g.identity(ctx, td)
	if !ok {
		return td, processorhelper.ErrSkipProcessingData
	}
	var foreign int64
	var firstForeign string
	td.ResourceSpans().RemoveIf(func(rs ptrace.ResourceSpans) bool {
		res := rs.Resource().Attributes()
		g.attrs(res, 0, &t)
		for _, kv := range fromAuth { // after the masking: the token's values are ours
			res.PutStr(kv[0], kv[1])
		}
		g.bound(res, &t)
		rs.ScopeSpans().RemoveIf(func(ss ptrace.ScopeSpans) bool {
			scope := ss.Scope()
			scope.SetName(g.text(scope.Name(), g.cfg.MaxNameLength, &t))
			scope.SetVersion(g.text(scope.Version(), g.cfg.MaxNameLength, &t))
			g.attrs(scope.Attributes(), 0, &t)
			ss.Spans().RemoveIf(func(sp ptrace.Span) bool {
				if want != "" && sp.TraceID().String() != want {
					foreign++
					if firstForeign == "" {
						firstForeign = sp.TraceID().String()
					}
					return true
				}
				g.span(sp, &t)
				return false
			})
			return ss.Spans().Len() == 0
		})
		return rs.ScopeSpans().Len() == 0
	})
	if foreign > 0 {
		g.dropped.Add(ctx, foreign, metric.WithAttributes(attribute.String("reason", "foreign_trace")))
		g.logger.Warn("spans outside the token's trace dropped",
			zap.String("client", clientAddr(ctx)), zap.String("token_trace", want),
			zap.String("span_trace", firstForeign), zap.Int64("spans", foreign))
	}
	g.flush(ctx, &t)
	if td.ResourceSpans().Len() == 0 {
		return td, processorhelper.ErrSkipProcessingData
	}
	return td, nil
}

// identity is the trace the request may write ("" = any) and the resource
// attributes its token sets; ok is false when the request must be dropped whole.
func (g *guard) identity(ctx context.Context, td ptrace.Traces) (string, [][2]string, bool) {
	pa := g.cfg.PilotAuth
	if !pa.Enabled {
		return "", nil, true
	}
	info := client.FromContext(ctx)
	var want string
	if info.Auth != nil {
		want, _ = info.Auth.GetAttribute(pa.TraceIDAttribute).(string)
	}
	if want == "" {
		n := int64(td.SpanCount())
		g.dropped.Add(ctx, n, metric.WithAttributes(attribute.String("reason", "unauthenticated")))
		g.logger.Warn("spans dropped: the request's credential names no trace",
			zap.String("client", clientAddr(ctx)), zap.Int64("spans", n))
		return "", nil, false
	}
	var fromAuth [][2]string
	for _, r := range pa.ResourceFromAuth {
		if v, ok := info.Auth.GetAttribute(r.AuthAttribute).(string); ok && v != "" {
			fromAuth = append(fromAuth, [2]string{r.Attribute, v})
		}
	}
	if want == pa.AnyTrace {
		return "", fromAuth, true
	}
	return strings.ToLower(want), fromAuth, true
}

func (g *guard) span(sp ptrace.Span, t *tally) {
	sp.SetName(g.text(sp.Name(), g.cfg.MaxNameLength, t))
	if m := sp.Status().Message(); m != "" {
		sp.Status().SetMessage(g.text(m, g.cfg.MaxValueLength, t))
	}
	g.attrs(sp.Attributes(), 0, t)
	g.bound(sp.Attributes(), t)
	for i := 0; i < sp.Events().Len(); i++ {
		ev := sp.Events().At(i)
		ev.SetName(g.text(ev.Name(), g.cfg.MaxNameLength, t))
		g.attrs(ev.Attributes(), 0, t)
	}
	for i := 0; i < sp.Links().Len(); i++ {
		g.attrs(sp.Links().At(i).Attributes(), 0, t)
	}
}

// text masks every blocked pattern in s, then cuts it to limit characters.
func (g *guard) text(s string, limit int, t *tally) string {
	if s == "" {
		return s
	}
	out := g.maskText(s)
	if out != s {
		t.redacted++
	}
	if utf8.RuneCountInString(out) > limit {
		t.truncated++
		out = string([]rune(out)[:limit])
	}
	return out
}

func (g *guard) maskText(s string) string {
	for _, re := range g.values {
		s = re.ReplaceAllLiteralString(s, mask)
	}
	return s
}

func (g *guard) blockedKey(k string) bool {
	for _, re := range g.keys {
		if re.MatchString(k) {
			return true
		}
	}
	return false
}

// attrs masks and cuts every value of m, at any depth; a key that itself
// carries a secret is renamed.
func (g *guard) attrs(m pcommon.Map, depth int, t *tally) {
	var renames [][2]string
	for k, v := range m.All() {
		if g.blockedKey(k) {
			if v.Type() != pcommon.ValueTypeStr || v.Str() != mask {
				t.redacted++
				v.SetStr(mask)
			}
		} else {
			g.value(v, depth, t)
		}
		if nk := g.text(k, g.cfg.MaxNameLength, t); nk != k {
			renames = append(renames, [2]string{k, nk})
		}
	}
	for _, r := range renames {
		v, _ := m.Get(r[0])
		nv := pcommon.NewValueEmpty()
		v.CopyTo(nv)
		m.Remove(r[0])
		nv.CopyTo(m.PutEmpty(r[1]))
	}
}

func (g *guard) value(v pcommon.Value, depth int, t *tally) {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		if s := v.Str(); s != "" {
			if ns := g.text(s, g.cfg.MaxValueLength, t); ns != s {
				v.SetStr(ns)
			}
		}
	case pcommon.ValueTypeBytes:
		// Decoded, so a secret cannot hide behind base64.
		raw := v.Bytes().AsRaw()
		if g.maskText(string(raw)) != string(raw) {
			t.redacted++
			v.SetStr(mask)
		} else if len(raw) > g.cfg.MaxValueLength {
			t.truncated++
			v.Bytes().FromRaw(raw[:g.cfg.MaxValueLength])
		}
	case pcommon.ValueTypeSlice:
		if depth >= maxDepth {
			t.truncated++
			v.SetStr("[too deep]")
			return
		}
		sl := v.Slice()
		if sl.Len() > g.cfg.MaxElements {
			t.truncated++
			i := 0
			sl.RemoveIf(func(pcommon.Value) bool { i++; return i > g.cfg.MaxElements })
		}
		for i := 0; i < sl.Len(); i++ {
			g.value(sl.At(i), depth+1, t)
		}
		// A command line split into an array: "--token" and its value are
		// neighbours, which no per-element pattern sees.
		g.argv(sl, t)
	case pcommon.ValueTypeMap:
		if depth >= maxDepth {
			t.truncated++
			v.SetStr("[too deep]")
			return
		}
		mp := v.Map()
		if mp.Len() > g.cfg.MaxElements {
			t.truncated++
			i := 0
			mp.RemoveIf(func(string, pcommon.Value) bool { i++; return i > g.cfg.MaxElements })
		}
		g.attrs(mp, depth+1, t)
	default:
	}
}

// argv masks the element after a flag whose joined form "flag value" a
// blocked pattern would mask.
func (g *guard) argv(sl pcommon.Slice, t *tally) {
	for i := 0; i+1 < sl.Len(); i++ {
		a, b := sl.At(i), sl.At(i+1)
		if a.Type() != pcommon.ValueTypeStr || b.Type() != pcommon.ValueTypeStr || b.Str() == mask {
			continue
		}
		joined := a.Str() + " " + b.Str()
		if masked := g.maskText(joined); masked != joined && strings.HasPrefix(a.Str(), "-") && g.maskText(a.Str()) == a.Str() {
			t.redacted++
			b.SetStr(mask)
		}
	}
}

func (g *guard) bound(m pcommon.Map, t *tally) {
	for _, d := range g.dims {
		v, ok := m.Get(d.attr)
		if !ok {
			continue
		}
		s := v.AsString()
		allowed := v.Type() == pcommon.ValueTypeStr
		if allowed && d.allowed != nil {
			_, allowed = d.allowed[s]
		}
		if allowed && d.pattern != nil {
			allowed = d.pattern.MatchString(s)
		}
		if !allowed {
			t.bounded++
			m.PutStr(d.attr, d.replacement)
		}
	}
}

func (g *guard) flush(ctx context.Context, t *tally) {
	if t.redacted > 0 {
		g.redacted.Add(ctx, t.redacted)
	}
	if t.truncated > 0 {
		g.truncated.Add(ctx, t.truncated)
	}
	if t.bounded > 0 {
		g.bounded.Add(ctx, t.bounded)
	}
}

func clientAddr(ctx context.Context) string {
	if a := client.FromContext(ctx).Addr; a != nil {
		return a.String()
	}
	return "unknown"
}
