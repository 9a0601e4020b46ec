package gwmsguardprocessor

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"
)

const jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"

var traceA = pcommon.TraceID{0xa1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
var traceB = pcommon.TraceID{0xb2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

type auth map[string]string

func (a auth) GetAttribute(k string) any {
	if v, ok := a[k]; ok {
		return v
	}
	return nil
}
func (a auth) GetAttributeNames() []string { return nil }

func testConfig() *Config {
	c := createDefaultConfig().(*Config)
	c.BlockedValues = []string{`eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`,
		`(?i)(?:^|\s)--?(?:[a-z0-9]+[-_])*(?:token|passw(?:or)?d|passphrase)(?:\s+|=)[^\s&;,]+`}
	c.BlockedKeyPatterns = []string{`(?i).*(token|passw|passphrase|(^|[._-])pwd($|[._-])|access[_.-]?key).*`}
	c.MaxNameLength, c.MaxValueLength, c.MaxElements = 20, 40, 3
	c.Dimensions = []DimensionConfig{
		{Attribute: "gwms.phase", AllowedValues: []string{"init", "setup"}, Replacement: "other"},
		{Attribute: "gwms.entry", Pattern: `[A-Za-z0-9_.-]{1,16}`, Replacement: "invalid"},
	}
	c.PilotAuth = PilotAuthConfig{Enabled: true, TraceIDAttribute: "claims.gwms_trace_id", AnyTrace: "*",
		ResourceFromAuth: []ResourceFromAuth{{Attribute: "gwms.entry", AuthAttribute: "claims.gwms_entry"}}}
	return c
}

func run(t *testing.T, cfg *Config, ctx context.Context, td ptrace.Traces) []ptrace.Traces {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	sink := new(consumertest.TracesSink)
	p, err := createTraces(context.Background(), processortest.NewNopSettings(typeStr), cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ConsumeTraces(ctx, td); err != nil {
		t.Fatal(err)
	}
	return sink.AllTraces()
}

func withAuth(a auth) context.Context {
	return client.NewContext(context.Background(), client.Info{Auth: a})
}

func traces(ids ...pcommon.TraceID) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("gwms.entry", "VICTIM_ENTRY")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("scope " + jwt)
	ss.Scope().SetVersion("--token=abc")
	for _, id := range ids {
		sp := ss.Spans().AppendEmpty()
		sp.SetTraceID(id)
		sp.SetName("run --password hunter2 now")
		sp.Status().SetMessage("failed with " + jwt)
		a := sp.Attributes()
		a.PutStr("gwms.phase", strings.Repeat("x", 100))
		a.PutStr("gwms.pwd", "hunter2")
		a.PutInt("aws_access_key_id", 42)
		a.PutEmptyBytes("blob").FromRaw([]byte("Authorization " + jwt))
		argv := a.PutEmptySlice("argv")
		for _, s := range []string{"cmd", "--token", "s3cr3t"} {
			argv.AppendEmpty().SetStr(s)
		}
		kv := a.PutEmptyMap("kv")
		kv.PutStr("passphrase", "open sesame")
		kv.PutStr("note", jwt)
		a.PutStr("long", strings.Repeat("y", 100))
		ev := sp.Events().AppendEmpty()
		ev.SetName("got " + jwt)
	}
	return td
}

func TestSecretsMaskedEverywhere(t *testing.T) {
	cfg := testConfig()
	cfg.PilotAuth.Enabled = false
	out := run(t, cfg, context.Background(), traces(traceA))
	if len(out) != 1 {
		t.Fatalf("want 1 batch, got %d", len(out))
	}
	rs := out[0].ResourceSpans().At(0)
	ss := rs.ScopeSpans().At(0)
	sp := ss.Spans().At(0)
	all := []string{ss.Scope().Name(), ss.Scope().Version(), sp.Name(), sp.Status().Message(), sp.Events().At(0).Name()}
	for k, v := range sp.Attributes().All() {
		all = append(all, k+"="+v.AsString())
	}
	joined := strings.Join(all, "|")
	for _, secret := range []string{"hunter2", "eyJhbGci", "s3cr3t", "open sesame", "abc", "42", "c2lnbmF0"} {
		if strings.Contains(joined, secret) {
			t.Errorf("secret %q survived: %s", secret, joined)
		}
	}
	if v, _ := sp.Attributes().Get("gwms.phase"); v.Str() != "other" {
		t.Errorf("phase not bounded: %q", v.Str())
	}
	if v, _ := rs.Resource().Attributes().Get("gwms.entry"); v.Str() != "VICTIM_ENTRY" {
		t.Errorf("entry changed without auth: %q", v.Str())
	}
	if v, _ := sp.Attributes().Get("long"); len(v.Str()) != cfg.MaxValueLength {
		t.Errorf("value not cut: %d", len(v.Str()))
	}
	if len(sp.Name()) > cfg.MaxNameLength {
		t.Errorf("name not cut: %q", sp.Name())
	}
}

func TestSpansOutsideTheTokensTraceAreDropped(t *testing.T) {
	out := run(t, testConfig(), withAuth(auth{"claims.gwms_trace_id": traceA.String(), "claims.gwms_entry": "MINE"}),
		traces(traceA, traceB, traceA))
	if len(out) != 1 || out[0].SpanCount() != 2 {
		t.Fatalf("want the 2 spans of the token's trace, got %v", out)
	}
	rs := out[0].ResourceSpans().At(0)
	if v, _ := rs.Resource().Attributes().Get("gwms.entry"); v.Str() != "MINE" {
		t.Errorf("entry not taken from the token: %q", v.Str())
	}
	for i := 0; i < rs.ScopeSpans().At(0).Spans().Len(); i++ {
		if rs.ScopeSpans().At(0).Spans().At(i).TraceID() != traceA {
			t.Error("a foreign span passed")
		}
	}
}

func TestOnlyForeignOrNoClaimForwardsNothing(t *testing.T) {
	if out := run(t, testConfig(), withAuth(auth{"claims.gwms_trace_id": traceA.String()}), traces(traceB)); len(out) != 0 {
		t.Errorf("foreign request forwarded: %d", len(out))
	}
	if out := run(t, testConfig(), withAuth(auth{}), traces(traceA)); len(out) != 0 {
		t.Errorf("request without a trace claim forwarded: %d", len(out))
	}
	if out := run(t, testConfig(), context.Background(), traces(traceA)); len(out) != 0 {
		t.Errorf("unauthenticated request forwarded: %d", len(out))
	}
}

func TestAnyTraceTokenWritesEveryTrace(t *testing.T) {
	out := run(t, testConfig(), withAuth(auth{"claims.gwms_trace_id": "*"}), traces(traceA, traceB))
	if len(out) != 1 || out[0].SpanCount() != 2 {
		t.Fatalf("want both spans, got %v", out)
	}
}

func TestValidateRefusesBadPatterns(t *testing.T) {
	c := testConfig()
	c.BlockedValues = append(c.BlockedValues, "(")
	if c.Validate() == nil {
		t.Error("bad pattern accepted")
	}
	c = testConfig()
	c.PilotAuth.AnyTrace = ""
	if c.Validate() == nil {
		t.Error("pilot_auth without any_trace accepted")
	}
}
