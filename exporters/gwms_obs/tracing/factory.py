"""Factory-side spans: one per condor_submit cluster, a traceparent per glidein.

Called from GlideinWMS's ``glideFactoryLib.submitGlideins`` around each
``executeSubmit`` (docs/tracing.md, "Factory integration")::

    with tracer.submit_cluster(entry_name, client_name, nr_to_submit, frontend=frontend_name,
                               schedd=schedd, submit_file=submit_file) as sc:
        exe_env = entry_env + sub_env + sc.submit_env()
        submit_out = executeSubmit(log, factoryConfig, username, schedd, exe_env, submit_file)
        cluster, count = extractJobId(submit_out)
        sc.submitted(cluster, count)

With ``log_dir`` (the entry's client log directory, where condor returns the
glideins' .out/.err) each submitted cluster is recorded in the trace ledger
(``tracing.ledger``), which the exporter uses to bind a returned spool to its
glidein. With a ``signer`` (``tracing.credentials``) and ``token_dir`` each
glidein gets its own short-lived JWT as a file for the submit file to
transfer; the factory's own exporter then authenticates with a token it mints
and renews itself.

The spans go through a BatchSpanProcessor: ending a span only queues it, the
export runs in the SDK's thread, and a full queue drops spans rather than
wait, so the factory loop never blocks on tracing (no sleep, unlike the
tracer2022 prototype's two seconds per cluster). The OTLP exporter is
configured by the standard OTEL_EXPORTER_OTLP_* variables.

With a monitoring controller (docs/tracing.md, "Monitoring controller") the
factory samples by its policy: ``GWMS_OBS_CONTROLLER_URL`` (the controller's
base URL) and ``GWMS_OBS_CONTROLLER_TOKEN_FILE`` (a bearer token, re-read at
each request), or ``FactoryTracer(controller=ControllerClient(...))``. A
``ControllerSampler`` asks it, for each ``condor_submit`` span, with the
cluster's factory, entry, site, frontend (the client name when no frontend
name is given) and security class, and samples the trace by
``policy.sampled``; the glidein spans follow it (``ParentBased``), so a dropped
cluster hands its glideins traceparents without the sampled flag and their
pilots trace nothing. No answer: the provider's usual sampler decides.
Without a controller nothing changes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType, TracebackType

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, Sampler, SamplingResult
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TraceState
from opentelemetry.util.types import Attributes as SpanAttributes

from .. import __version__
from ..controller import policy as P
from ..controller.client import ControllerClient
from . import conventions as C
from . import ledger as L
from .credentials import ENV_TOKEN_DIR, SERVICE_LIFETIME, PilotSigner


def otlp_traces_configured(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    if env.get("OTEL_TRACES_EXPORTER", "otlp") == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


class _RenewingExporter(SpanExporter):
    """OTLP/HTTP with a service token minted by the factory, renewed at half its lifetime."""

    def __init__(self, signer: PilotSigner, lifetime: float = SERVICE_LIFETIME) -> None:
        self.signer = signer
        self.lifetime = lifetime
        self._inner: SpanExporter | None = None
        self._minted = 0.0

    def _exporter(self) -> SpanExporter:
        now = self.signer.clock()
        if self._inner is None or now - self._minted > self.lifetime / 2:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            from .outbox import otlp_headers

            token = self.signer.mint_service("factory", self.lifetime)
            old, self._minted = self._inner, now
            self._inner = OTLPSpanExporter(headers={**otlp_headers(), "Authorization": f"Bearer {token}"})
            if old is not None:
                old.shutdown()
        return self._inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._exporter().export(spans)

    def shutdown(self) -> None:
        if self._inner is not None:
            self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class ControllerSampler(Sampler):
    """Samples each condor_submit trace as the monitoring controller's policy says; other spans: ``fallback``.

    Use as the root of a ``ParentBased`` sampler (``controller_sampler``), so
    the glidein spans follow their cluster's decision.
    """

    def __init__(self, client: ControllerClient, fallback: Sampler) -> None:
        self.client = client
        self.fallback = fallback

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: SpanAttributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if name != C.SPAN_SUBMIT:
            return self.fallback.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)
        given = dict(attributes or {})
        decision, result = self.client.lookup(_policy_attributes(given))
        if decision is None:  # the factory's default, said on the span when it is kept
            r = self.fallback.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)
            extra = {**r.attributes, C.CONTROLLER_RESULT: result} if r.decision is not Decision.DROP else None
            return SamplingResult(r.decision, extra, r.trace_state)
        state = trace.get_current_span(parent_context).get_span_context().trace_state
        if not P.sampled(f"{trace_id:032x}", decision.effect):
            return SamplingResult(Decision.DROP, None, state)
        # the SDK gives the span the result's attributes, not the ones it was started with
        given.update({C.CONTROLLER_KIND: decision.kind, C.CONTROLLER_RESULT: result})
        if decision.rule is not None:
            given[C.CONTROLLER_RULE] = decision.rule
        return SamplingResult(Decision.RECORD_AND_SAMPLE, MappingProxyType(given), state)

    def get_description(self) -> str:
        return f"ControllerSampler{{{self.client.url},fallback={self.fallback.get_description()}}}"


def _policy_attributes(attrs: Mapping[str, object]) -> P.Attributes:
    def text(key: str) -> str:
        v = attrs.get(key)
        return v if isinstance(v, str) else ""

    return P.Attributes(
        factory=text(C.FACTORY),
        entry=text(C.ENTRY),
        site=text(C.SITE),
        frontend=text(C.FRONTEND) or text(C.CLIENT),
        security_class=text(C.SECURITY_CLASS),
    )


def controller_sampler(client: ControllerClient, fallback: Sampler | None = None) -> Sampler:
    """``ParentBased(ControllerSampler)``; ``fallback`` defaults to what OTEL_TRACES_SAMPLER configures."""
    if fallback is None:
        # the SDK's own reading of OTEL_TRACES_SAMPLER (parentbased_always_on when unset)
        fallback = TracerProvider(shutdown_on_exit=False).sampler
    return ParentBased(ControllerSampler(client, fallback))


def make_provider(
    factory: str,
    glidein_name: str = "",
    exporter: SpanExporter | None = None,
    signer: PilotSigner | None = None,
    controller: ControllerClient | None = None,
    **batch: int,
) -> TracerProvider:
    """A TracerProvider for the factory; OTLP/HTTP when the OTEL_* variables name an endpoint.

    Without an exporter spans are still created (pilots get valid
    traceparents) and simply not exported. ``batch`` goes to
    BatchSpanProcessor (max_queue_size, schedule_delay_millis, ...).
    ``controller`` (default: from GWMS_OBS_CONTROLLER_URL, when set) samples
    each submit cluster by the monitoring controller's policy.
    """
    attrs = {
        C.SERVICE_VERSION: __version__,
        C.CONVENTIONS: C.VERSION,
        C.FACTORY: factory,
    }
    if glidein_name:
        attrs[C.GLIDEIN_NAME] = glidein_name
    # Resource.create puts the attributes given here over OTEL_RESOURCE_ATTRIBUTES and
    # OTEL_SERVICE_NAME (the spec: code beats the environment), each key once. Our
    # service.name is only a default, so it is given only when the user set none.
    if not _service_name_configured():
        attrs[C.SERVICE_NAME] = C.SERVICE_FACTORY
    if controller is None:
        controller = ControllerClient.from_env(os.environ)
    sampler = controller_sampler(controller) if controller is not None else None
    provider = TracerProvider(resource=Resource.create(attrs), sampler=sampler)
    if exporter is None and otlp_traces_configured():
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = _RenewingExporter(signer) if signer is not None else OTLPSpanExporter()
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter, **batch))  # type: ignore[arg-type]
    return provider


def _service_name_configured(env: Mapping[str, str] | None = None) -> bool:
    """OTEL_SERVICE_NAME, or service.name in OTEL_RESOURCE_ATTRIBUTES, is set."""
    e = os.environ if env is None else env
    if e.get("OTEL_SERVICE_NAME", "").strip():
        return True
    pairs = (kv.partition("=") for kv in e.get(C.ENV_RESOURCE_ATTRIBUTES, "").split(","))
    return any(k.strip() == C.SERVICE_NAME and v.strip() for k, _, v in pairs)


def traceparent(span: Span) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


class SubmitCluster:
    """One condor_submit: its span, and a child span (and traceparent) per glidein."""

    def __init__(
        self,
        tracer: trace.Tracer,
        span: Span,
        count: int,
        resource_attrs: dict[str, str],
        glidein_attrs: dict[str, str],
        *,
        log_dir: str = "",
        signer: PilotSigner | None = None,
        token_dir: str | Path | None = None,
    ) -> None:
        self.span = span
        self.log_dir = log_dir
        self.token_files: Path | None = None  # this cluster's token directory, once written
        self.count = count
        self._resource_attrs = resource_attrs
        ctx = trace.set_span_in_context(span)
        # Created before condor_submit runs, so their contexts can go in the
        # submit description; their cluster/proc are set once known.
        self.glideins: list[Span] = [
            tracer.start_span(C.SPAN_GLIDEIN_SUBMIT, ctx, SpanKind.PRODUCER, {**glidein_attrs, C.CONDOR_PROC: i})
            for i in range(count)
        ]
        self.traceparents = [traceparent(g) for g in self.glideins]
        self._done = False
        if signer is not None and token_dir is not None:
            self.token_files = signer.write_glidein_tokens(
                token_dir,
                f"{span.get_span_context().trace_id:032x}",
                count,
                entry=resource_attrs.get(C.ENTRY, ""),
                client=resource_attrs.get(C.CLIENT, ""),
            )

    @property
    def traceparent(self) -> str:
        return traceparent(self.span)

    @property
    def tracestate(self) -> str:
        """The trace's W3C tracestate (a sampler may set one), "" when none or not passable.

        It goes into the submit file's ``environment`` string unquoted, so a
        value condor would split or unquote (spaces, quotes) is not passed;
        one over the W3C bounds (C.is_tracestate) neither.
        """
        ts = self.span.get_span_context().trace_state.to_header()
        if not C.is_tracestate(ts) or any(c in ts for c in " \t'\""):
            return ""
        return ts

    def submit_env(self) -> list[str]:
        """``VAR=value`` entries for condor_submit's environment (GlideinWMS's exe_env).

        The submit file picks the glidein's own traceparent with
        ``$CHOICE(Process, GWMS_TRACEPARENT_LIST)``, passes the trace's
        tracestate (``GLIDEIN_TRACESTATE``, when it has one) next to it and the
        resource attributes on (docs/tracing.md).
        """
        env = [
            f"{C.ENV_TRACEPARENT_LIST}={','.join(self.traceparents)}",
            f"GLIDEIN_{C.ENV_RESOURCE_ATTRIBUTES}={C.resource_attributes_env(self._resource_attrs)}",
        ]
        if self.tracestate:
            env.append(f"{C.ENV_TRACESTATE_CLUSTER}={self.tracestate}")
        if self.token_files is not None:  # a directory name, not a secret: the tokens are files
            env.append(f"{ENV_TOKEN_DIR}={self.token_files}")
        return env

    def submitted(self, cluster: int, count: int | None = None) -> None:
        """condor_submit succeeded: record the cluster; glideins beyond ``count`` were not queued."""
        n = self.count if count is None else count
        self.span.set_attribute(C.CONDOR_CLUSTER, cluster)
        self.span.set_attribute(C.GLIDEIN_COUNT, n)
        for i, g in enumerate(self.glideins):
            g.set_attribute(C.CONDOR_CLUSTER, cluster)
            if i >= n:
                g.set_status(Status(StatusCode.ERROR, "not queued by condor_submit"))
        if self.log_dir:
            ctx = self.span.get_span_context()
            spans = [f"{g.get_span_context().span_id:016x}" for g in self.glideins[:n]]
            L.append_record(self.log_dir, cluster, f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}", spans,
                            self._resource_attrs)  # fmt: skip
        self._end()

    def failed(self, exc: BaseException) -> None:
        self.span.record_exception(exc)
        self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:200]))
        for g in self.glideins:
            g.set_status(Status(StatusCode.ERROR, "condor_submit failed"))
        self._end()

    def _end(self) -> None:
        if self._done:
            return
        self._done = True
        for g in self.glideins:
            g.end()
        self.span.end()


class FactoryTracer:
    """The factory's tracer; one per factory (or entry) process."""

    def __init__(
        self,
        factory: str,
        glidein_name: str = "",
        provider: TracerProvider | None = None,
        *,
        signer: PilotSigner | None = None,
        token_dir: str | Path | None = None,
        controller: ControllerClient | None = None,
    ) -> None:
        """``controller``: sample by the monitoring controller (make_provider; default from the environment).

        With your own ``provider``, give the controller to ``make_provider`` instead: a provider's
        sampler is fixed when it is made.
        """
        if provider is not None and controller is not None:
            raise ValueError("give the controller to make_provider(controller=...), which makes the sampler")
        self.factory = factory
        self.glidein_name = glidein_name
        self.signer = signer
        self.token_dir = token_dir
        self.provider = provider or make_provider(factory, glidein_name, signer=signer, controller=controller)
        self.tracer = self.provider.get_tracer("gwms_obs.tracing.factory", __version__)

    @contextlib.contextmanager
    def submit_cluster(
        self,
        entry: str,
        client: str,
        count: int,
        *,
        frontend: str = "",
        site: str = "",
        schedd: str = "",
        submit_file: str = "",
        log_dir: str = "",
        security_class: str = "",
    ) -> Iterator[SubmitCluster]:
        """Span the condor_submit of ``count`` glideins; ends it on exit (an exception marks it failed).

        ``log_dir`` is the entry's client log directory (where condor returns
        ``job.C.P.err``): the cluster is recorded in its trace ledger.
        ``security_class`` (the frontend's, when known) goes on the span, for the controller's policy.
        """
        common = {C.FACTORY: self.factory, C.ENTRY: entry, C.CLIENT: client}
        extra = {C.FRONTEND: frontend, C.SITE: site, C.CONDOR_SCHEDD: schedd, C.GLIDEIN_NAME: self.glidein_name}
        common.update({k: v for k, v in extra.items() if v})
        attrs: dict[str, str | int] = {**common, C.GLIDEIN_COUNT: count}
        if submit_file:
            attrs[C.SUBMIT_FILE] = submit_file
        if security_class:
            attrs[C.SECURITY_CLASS] = security_class
        # A new trace per cluster: the factory's cycle is not a request to hang glideins under.
        span = self.tracer.start_span(C.SPAN_SUBMIT, trace.set_span_in_context(trace.INVALID_SPAN),
                                      SpanKind.CLIENT, attrs)  # fmt: skip
        resource = {k: v for k, v in common.items() if k != C.CONDOR_SCHEDD}
        sc = SubmitCluster(self.tracer, span, count, resource, common, log_dir=log_dir, signer=self.signer,
                           token_dir=self.token_dir)  # fmt: skip
        try:
            yield sc
        except BaseException as e:
            sc.failed(e)
            raise
        finally:
            sc._end()

    def flush(self, timeout_millis: int = 5000) -> bool:
        return self.provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.provider.shutdown()

    def __enter__(self) -> FactoryTracer:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.shutdown()
