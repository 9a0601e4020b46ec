# shellcheck shell=bash
# gwms-trace.sh - OpenTelemetry spans from glidein_startup.sh, conventions v1 (docs/tracing.md).
#
# Sourced, never executed. Runs on bash 4.2 (EL7) to 5.x (EL9+). Spans are
# appended to a spool file as OTLP/JSON, one ExportTraceServiceRequest per
# line, as each span ends; gwms_trace_flush sends the spool over OTLP/HTTP or,
# when that is impossible, writes it into stderr framed like condor's logs so
# the factory's exporter forwards it. Every function returns 0 (except
# gwms_trace_script, which returns its command's status): tracing never fails
# a pilot, and the only network wait is the bounded one in gwms_trace_flush.
#
# API (names match exporters/gwms_obs/tracing/conventions.py):
#   gwms_trace_init [spool]          start the pilot's root span "glidein" (reads TRACEPARENT, TRACESTATE)
#   gwms_trace_control [K=V ...]     ask the monitoring controller once how verbosely to trace (keys: factory
#                                    entry site frontend security_class pilot); after init, before the first phase
#   gwms_trace_resource KEY VALUE    resource attribute (before the first span ends; later: on the root span)
#   gwms_trace_phase NAME            end the open phase (if any) and begin phase NAME
#   gwms_trace_phase_end [RC]        end the open phase
#   gwms_trace_begin NAME [K=V ...]  begin a child of the innermost open span
#   gwms_trace_end [RC [MESSAGE]]    end the innermost span; RC 0 -> OK, other -> ERROR + process.exit.code
#   gwms_trace_script NAME CMD ...   run CMD in a span for script NAME; returns CMD's status (with a controller's
#                                    answer: + process.executable.name, and process.command_line if it allows)
#   gwms_trace_attr [-i|-b|-d] K V   attribute on the innermost open span (string, int, bool, double)
#   gwms_trace_event NAME [K=V ...]  timestamped event on the innermost open span
#   gwms_trace_link TRACEPARENT [K=V ...]  link from the innermost open span
#   gwms_trace_flush [RC]            end every open span (the root with RC), then send or frame the spool
# Variables it sets: TRACEPARENT (innermost open span, exported), TRACESTATE (exported unchanged
# when valid and its TRACEPARENT was, else unset), GWMS_PILOT_TRACEPARENT
# (the root span, exported for the payload to link to), GWMS_TRACE_SPAN_ID (last begun span),
# GWMS_TRACE_SPOOL, GWMS_TRACE_RESULT (after flush: sent | stderr | kept | empty | off).
# Settings (environment): GWMS_TRACE=0 disables; GWMS_TRACE_MAX_SPANS (10000); GWMS_TRACE_MAX_BYTES (8 MiB,
# and never more than a quarter of the work dir's free space, read by df at init and after each MiB);
# GWMS_TRACE_TIMEOUT (5 s for the whole POST, 0 < s <= 60); OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
# OTEL_EXPORTER_OTLP_ENDPOINT (+/v1/traces); GWMS_TRACE_TOKEN_FILE (this glidein's own
# token, a file the job transferred, default gwms-trace.jwt in the start directory: read
# once by gwms_trace_init, then deleted); GWMS_TRACE_TOKEN (a shared static token, older setups);
# OTEL_EXPORTER_OTLP_TRACES_HEADERS / OTEL_EXPORTER_OTLP_HEADERS (k=v,...);
# OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME.
# Verbosity (docs/tracing.md, "Monitoring controller"): GWMS_TRACE_VERBOSITY (off | phases | scripts |
# commands; default commands, i.e. every span) is the factory's default; gwms_trace_control replaces it
# with the answer of GWMS_TRACE_CONTROLLER_URL (GET /v1/decide, one curl call bounded by
# GWMS_TRACE_CONTROLLER_TIMEOUT, 2 s; bearer token GWMS_TRACE_CONTROLLER_TOKEN_FILE or
# GWMS_TRACE_CONTROLLER_TOKEN). phases: the root and gwms_trace_phase spans; scripts: + spans begun
# directly under a phase or the root; commands: + deeper spans. A suppressed span's end, attributes and
# events are dropped with it. Root attributes gwms.trace.verbosity, gwms.controller.result
# (answered | timeout | error | unconfigured), gwms.controller.kind, gwms.controller.rule.
#
# Cost: on bash >= 5 a span forks nothing (EPOCHREALTIME, SRANDOM, printf -v,
# one appending redirection), and its common case (gwms_trace_script's: a plain name and
# gwms.script value, exit code 0) runs inline in gwms_trace_begin and gwms_trace_end:
# about 65 us a span where the general code takes 150 (benchmarks/trace_shell.py).
# On bash 4 (EL7 4.2, EL8 4.4) ids come from a
# splitmix64 generator seeded once from /dev/urandom, and time from
# /proc/uptime read with the builtin read (10 ms resolution, anchored to one
# `date +%s%N` at init) - still no fork per span; where /proc/uptime is not
# readable, `date +%s%N` runs once per timestamp. GWMS_TRACE_COMPAT=4 forces
# the bash-4 path and GWMS_TRACE_CLOCK=date the date clock (tests, benchmarks).

# Hostile collectors and environments: both requests (controller, spans) go through _gt_req, one bound on the
# whole request whatever the client, no redirect followed, headers checked before they become client config;
# the library's own variables are never exported, even under `set -a`, and `set -x` is off inside it.
#
# Secrets never reach the spool: every name, key and value is masked where it looks like a
# token, password, key, DN, PEM block or credential argument (the patterns of
# exporters/gwms_obs/tracing/redact.py, in POSIX ERE), then cut to 128 (names) or 1024
# (values) characters; the exporter and the collector mask again.
#
# shellcheck disable=SC2034  # GWMS_TRACE_* are set for the sourcing script
true
[[ -n ${_GWMS_TRACE_LOADED-} ]] && return 0
# Sourced under `set -a`, every variable and function below would be exported to the pilot's children:
# allexport is off while the library loads (restored at its end), and _gt_* names a hostile environment
# exported lose that attribute.
case $- in *a*) set +a; _gt_sa=1 ;; *) _gt_sa=0 ;; esac
[[ -z ${!_gt_@} ]] || export -n "${!_gt_@}"
_GWMS_TRACE_LOADED=1
GWMS_TRACE_VERSION=1

_gt_on=0
_gt_fast=0
_gt_clock=
_gt_spool=
_gt_trace=
_gt_rparent=        # remote parent span id (from TRACEPARENT), "" for a new trace
_gt_n=0             # open spans on the stack
_gt_phase=-1        # stack index of the open phase
_gt_cur=            # id of the innermost open span (_gt_rparent when none is open)
_gt_par=() _gt_head=() _gt_attrs=() _gt_events=() _gt_links=()   # the open spans (_gt_par: parent ids)
_gt_root=           # the root span's id
_gt_elx=1           # _gt_events and _gt_links are empty from this index up (emptied when a span ends), and >= 1
_gt_go=0            # gwms_trace_begin/end may take their inline case (_gt_gosync)
_gt_res=            # resource attributes, JSON array body
_gt_rk=()           # resource keys, one entry per key (a later setting replaces the earlier)
_gt_rv=()           # their KeyValues
_gt_tsj=            # ,"traceState":"..." of this trace's spans ("" without a tracestate)
_gt_resj=           # frozen resource JSON, set when the first span is written
_gt_pre=            # {"resourceSpans":[ and _gt_resj: every line's start
_gt_hp='' _gt_tp='' # {"traceId":"TRACE","spanId":" and 00-TRACE-: every span's
# The end of a span's line when it ends with 0, after its attributes and without events or links.
_gt_x0='{"key":"process.exit.code","value":{"intValue":"0"}}],"events":[],"links":[],"status":{"code":1}}]}]}]}'
_gt_spans=0
_gt_dropped=0
_gt_max=10000
_gt_t=
_gt_id=
_gt_e=              # _gt_text's result
_gt_a=              # _gt_kv's and _gt_kvs' result
_gt_kr='' _gt_kj='' _gt_kb=''   # _gt_key's last key, as JSON, secret or not
# gwms_trace_begin's inline case for one attribute (_gt_kqset): _gt_kq is "KEY=", _gt_kl its length, _gt_ka the
# KeyValue's JSON up to the value; before there is one, _gt_kq is a newline and _gt_kl 0, so that an attribute
# starting with it keeps the newline in its text, which fails the inline test.
_gt_kq=$'\n' _gt_kl=0 _gt_ka=
_gt_kvo='' _gt_kvp=''   # _gt_kvs' result so far, and its loop variable
_gt_at=             # _gt_pop's attributes, status, events and links of the span it writes
_gt_st=
_gt_x=
_gt_c=              # gwms_trace_begin's name and value, tested at once
_gt_tok=            # this glidein's token, read from its file (never exported)
_gt_v=3             # verbosity: 0 off, 1 phases, 2 scripts, 3 commands
_gt_skip=0          # suppressed spans open (nested inside the innermost real one)
_gt_rec=0           # gwms_trace_script records: 0 nothing (no controller), 1 executable name, 2 command line
_gt_asked=0         # gwms_trace_control ran
_gt_lv=             # _gt_level's result
# The spool's bytes (_gt_room): written so far; GWMS_TRACE_MAX_BYTES; the limit (the cap, or less where the work
# dir is short of space); the root's reserve in it; where free space is read again; the inline end's bound.
_gt_bytes=0 _gt_bcap=8388608 _gt_bmax=8388608 _gt_bres=65536 _gt_bchk=0 _gt_blim=0 _gt_bfast=0
_gt_lfix=0 _gt_lmax=0   # an inline line's length but for its head, attributes and end time; an upper bound of it
_gt_l=              # _gt_pop's line
_gt_sdir=.          # the spool's directory
_gt_hl=()           # the next request's headers, "Name: value" each, checked (_gt_hadd); an array is never exported
_gt_to=             # _gt_tmo's result
# Secret shapes (ERE, matched case-insensitively); each match becomes ****.
_gt_kw='(passw(or)?d|passphrase|pwd|token|secret|api[_-]?key|access[_-]?key([_-]id)?)'
_gt_masks=(
  'eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*'
  'bearer[[:space:]]+[A-Za-z0-9._~+/=-]+'
  '-----BEGIN [A-Z0-9 ]+-----.*'
  '://[^/[:space:]:@]+:[^/[:space:]@]+@'
  "-?-[a-z0-9_-]*${_gt_kw}[[:space:]]+[^[:space:]&;,]+"
  "${_gt_kw}[[:space:]]*[=:][[:space:]]*[^[:space:]&;,]+"
  '(AKIA|ASIA)[0-9A-Z]{16}'
  'gh[pousr]_[A-Za-z0-9]{30,}'
  '(/(DC|C|ST|L|O|OU|CN|UID|emailAddress)=[^/[:space:]]+){2,}'
  '(CN|UID)=[^,/=[:space:]]+(,[[:space:]]*(OU|O|DC|C|L|ST|CN)=[^,/=[:space:]]+)+'
  '/tmp/x509up_u[0-9]+'
)
# Keys whose whole value is a secret: _gt_key's case on the lower-cased key, the ERE
#   (token|passw|passphrase|secret|credential|proxy|x509|api[_.-]?key|access[_.-]?key|
#    authori[sz]ation|cookie|private[_.-]?key|subject|(^|[._-])(dn|pwd)([._-]|$))
# spelled as globs (bash compiles a =~ regex at every use: tens of µs per attribute).

# --- clock and ids ---------------------------------------------------------------------------
# _gt_now: _gt_t = now, Unix nanoseconds (a decimal string).
_gt_now() {
  if ((_gt_fast)); then
    _gt_t=${EPOCHREALTIME/[.,]/}000   # the radix follows LC_NUMERIC
  elif [[ $_gt_clock == uptime ]]; then
    local up
    read -r up _ </proc/uptime 2>/dev/null || up=
    up=${up/./}
    case $up in
      '' | *[!0-9]*) _gt_clock='date'; _gt_now; return 0 ;;
    esac
    _gt_t=$((_gt_base_ns + (10#$up - _gt_base_cs) * 10000000))
  else
    _gt_t=$(date +%s%N 2>/dev/null) || _gt_t=''   # a failed assignment would end a `set -e` pilot
    case $_gt_t in
      '' | *[!0-9]*) printf -v _gt_t '%(%s)T000000000' -1 ;;   # no %N: whole seconds
    esac
  fi
}

# _gt_rand64: _gt_id = 16 hex digits.
_gt_rand64() {
  if ((_gt_fast)); then
    printf -v _gt_id '%08x%08x' "$SRANDOM" "$SRANDOM"
  else
    # splitmix64; bash arithmetic is signed 64-bit, so right shifts are masked to be logical.
    local z
    _gt_rs=$((_gt_rs + 0x9E3779B97F4A7C15))
    z=$_gt_rs
    z=$(((z ^ ((z >> 30) & 0x3FFFFFFFF)) * 0xBF58476D1CE4E5B9))
    z=$(((z ^ ((z >> 27) & 0x1FFFFFFFFF)) * 0x94D049BB133111EB))
    z=$((z ^ ((z >> 31) & 0x1FFFFFFFF)))
    printf -v _gt_id '%016x' "$z"
  fi
  [[ $_gt_id == 0000000000000000 ]] && _gt_rand64   # the all-zero id is invalid
  return 0
}

_gt_seed() {
  local a b
  # One fork per pilot, not per span; without od, what the shell knows about itself.
  read -r a b < <(od -An -N8 -tx4 /dev/urandom 2>/dev/null) || true
  case "$a$b" in
    '' | *[!0-9a-f]*) _gt_rs=$((RANDOM << 48 ^ RANDOM << 32 ^ $$ << 16 ^ RANDOM ^ ${_gt_base_ns:-0})) ;;
    *) _gt_rs=$((0x$a << 32 | 0x$b)) ;;
  esac
}

# --- secrets and lengths -------------------------------------------------------------------------
# _gt_text LIMIT STRING: _gt_e = STRING, secrets masked, cut to LIMIT characters, then
# escaped as the inside of a JSON string (_gt_esc).
_gt_text() {
  # fast path: nothing that could start a secret, nothing to escape (no fork, no regex);
  # case-insensitive like the masks themselves (_gt_mask matches under nocasematch)
  case $2 in
    *[!A-Za-z0-9._/\ -]* | *[Tt][Oo][Kk]* | *[Pp][Aa][Ss]* | *[Pp][Ww][Dd]* | *[Ss][Ee][Cc]* | *[Kk][Ee][Yy]* | \
    *[Ee][Yy][Jj]* | *[Bb][Ee][Aa][Rr][Ee][Rr]* | *[Bb][Ee][Gg][Ii][Nn]* | *[Cc][Nn]* | *[Dd][Cc]* | *[Uu][Ii][Dd]* | \
    *[Xx]509* | *[Aa][Kk][Ii][Aa]* | *[Aa][Ss][Ii][Aa]* | *[Gg][Hh]?_*) _gt_text_slow "$@" ;;
    *) _gt_e=${2:0:$1} ;;   # these characters need no escaping
  esac
}

# Bash copies a function's whole body at every call, so the functions that run for every span
# keep their rare branches in functions of their own (_gt_text_slow, _gt_key, _gt_kvt,
# _gt_status, and _gt_now and _gt_rand64 on bash 4).
_gt_text_slow() {
  _gt_e=$2
  _gt_mask
  ((${#_gt_e} > $1)) && _gt_e=${_gt_e:0:$1}
  _gt_esc "$_gt_e"
}

_gt_mask() {
  local re n had=0
  shopt -q nocasematch && had=1   # no $(shopt -p): that would fork
  shopt -s nocasematch
  for re in "${_gt_masks[@]}"; do
    n=0
    while ((n++ < 64)) && [[ $_gt_e =~ $re ]]; do   # each replacement removes its keyword: no loop
      _gt_e=${_gt_e/"${BASH_REMATCH[0]}"/****}
    done
  done
  ((had)) || shopt -u nocasematch
  return 0
}

# --- JSON ----------------------------------------------------------------------------------------
# _gt_esc STRING: _gt_e = STRING as the inside of a JSON string. Values outside
# printable ASCII become "?" so the spool is valid UTF-8 whatever the input.
_gt_esc() {
  _gt_e=$1
  case $_gt_e in
    *[!A-Za-z0-9._/:@+=,%\ -]*) ;;
    *) return 0 ;;
  esac
  # Rare slow path, a byte at a time: no ${//} replacement strings, whose
  # backslash handling differs between bash 4.2, 4.3+ and 5.2.
  local LC_ALL=C s=$1 out='' c i
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    # shellcheck disable=SC1003  # '\' is one backslash, in single quotes
    case $c in
      '"') out+='\"' ;;
      '\') out+='\\' ;;
      $'\n') out+='\n' ;;
      $'\t') out+='\t' ;;
      $'\r') out+='\r' ;;
      [\ -~]) out+=$c ;;
      *) out+='?' ;;
    esac
  done
  _gt_e=$out
}

# _gt_key KEY: _gt_kj = KEY as JSON string text, _gt_kb = 1 when KEY names a secret (else ""),
# _gt_kr = KEY; _gt_kv calls it only for a key other than the last one.
_gt_key() {
  _gt_text 128 "$1"
  _gt_kr=$1 _gt_kj=$_gt_e _gt_kb=
  case ${1,,} in   # a secret's key (the ERE above)
    *token* | *passw* | *passphrase* | *secret* | *credential* | *proxy* | *x509* | *apikey* | *api[_.-]key* | \
    *accesskey* | *access[_.-]key* | *authori[sz]ation* | *cookie* | *privatekey* | *private[_.-]key* | *subject* | \
    dn | dn[._-]* | *[._-]dn | *[._-]dn[._-]* | pwd | pwd[._-]* | *[._-]pwd | *[._-]pwd[._-]*) _gt_kb=1 ;;
  esac
}

# _gt_kqset KEY: KEY becomes gwms_trace_begin's inline key (_gt_kq, _gt_kl, _gt_ka) if it is _gt_kv's last key
# (its JSON in _gt_kj), no secret's, and plain lower-case ASCII. It stays so while other keys come and go.
_gt_kqset() {
  [[ -n $1 && $1 == "$_gt_kr" && -z $_gt_kb && $1 != *[!abcdefghijklmnopqrstuvwxyz0123456789._-]* ]] || return 0
  _gt_kq=$1= _gt_kl=$((${#1} + 1)) _gt_ka="{\"key\":\"$_gt_kj\",\"value\":{\"stringValue\":\""
}

# _gt_kv KEY VALUE [TYPE]: _gt_a = one OTLP/JSON KeyValue; a secret's key hides the value, whatever its type.
_gt_kv() {
  [[ $1 == "$_gt_kr" ]] || _gt_key "$1"
  if [[ -n $_gt_kb ]]; then
    _gt_a="{\"key\":\"$_gt_kj\",\"value\":{\"stringValue\":\"****\"}}"
  elif [[ ${3:-s} == s ]]; then
    _gt_text 1024 "$2"
    _gt_a="{\"key\":\"$_gt_kj\",\"value\":{\"stringValue\":\"$_gt_e\"}}"
  else
    _gt_kvt "$_gt_kj" "$2" "$3"
  fi
}

# _gt_kvt JSON_KEY VALUE TYPE: _gt_kv for an int (i), double (d) or bool (b); a string if VALUE is not one.
_gt_kvt() {
  local k=$1 t=$3
  case $t in
    i) case $2 in -[0-9]* | [0-9]*) [[ ${2#-} != *[!0-9]* ]] || t=s ;; *) t=s ;; esac ;;
    d) case $2 in '' | *[!0-9.eE+-]*) t=s ;; esac ;;
    b) case $2 in true | false) ;; *) t=s ;; esac ;;
  esac
  case $t in
    i) _gt_a="{\"key\":\"$k\",\"value\":{\"intValue\":\"$2\"}}" ;;
    d) _gt_a="{\"key\":\"$k\",\"value\":{\"doubleValue\":$2}}" ;;
    b) _gt_a="{\"key\":\"$k\",\"value\":{\"boolValue\":$2}}" ;;
    *) _gt_text 1024 "$2"; _gt_a="{\"key\":\"$k\",\"value\":{\"stringValue\":\"$_gt_e\"}}" ;;
  esac
}

# _gt_kvs K=V ...: _gt_a = comma-joined KeyValues.
_gt_kvs() {
  _gt_kvo=
  for _gt_kvp in "$@"; do
    [[ $_gt_kvp == *=* ]] || continue
    _gt_kv "${_gt_kvp%%=*}" "${_gt_kvp#*=}"
    _gt_kvo+=${_gt_kvo:+,}$_gt_a
  done
  _gt_a=$_gt_kvo
}


_gt_pct_decode() {   # _gt_e = $1 with %XX decoded (OTEL_RESOURCE_ATTRIBUTES values)
  local v=$1 out='' pre hex ch
  while [[ $v == *%* ]]; do
    pre=${v%%\%*}
    hex=${v:${#pre}+1:2}
    if [[ $hex == [0-9A-Fa-f][0-9A-Fa-f] ]]; then
      printf -v ch '%b' "\\x$hex"
      out+=$pre$ch
      v=${v:${#pre}+3}
    else
      out+=$pre%
      v=${v:${#pre}+1}
    fi
  done
  _gt_e=$out$v
}

# _gt_typed KEY VALUE: _gt_a = KeyValue, integer-valued attributes of the
# conventions typed as int even when they arrive as text.
_gt_typed() {
  case $1 in
    gwms.condor.cluster | gwms.condor.proc | process.pid | process.exit.code | gwms.glidein.count)
      _gt_kv "$1" "$2" i ;;
    *) _gt_kv "$1" "$2" s ;;
  esac
}

_gt_res_add() {   # KEY VALUE: set in the resource; a key set again keeps its place, takes the new value
  local i n=${#_gt_rk[@]}
  _gt_typed "$1" "$2"
  for ((i = 0; i < n; i++)); do
    [[ ${_gt_rk[i]} == "$1" ]] && break
  done
  _gt_rk[i]=$1
  _gt_rv[i]=$_gt_a
  _gt_res=
  for ((i = 0; i < ${#_gt_rv[@]}; i++)); do
    _gt_res+=${_gt_res:+,}${_gt_rv[i]}
  done
}

# _gt_tracestate_ok VALUE: VALUE is a W3C tracestate list we may propagate: list members
# key=value separated by commas (optional spaces and tabs around them, empty members
# allowed), keys simple (a-z first) or tenant@system, values 1-256 printable ASCII
# characters without "," and "=" (no trailing space), each key once, at most 32 members,
# at most 512 characters in all, at least one member. Called once per pilot, never per span.
_gt_tracestate_ok() {
  local LC_ALL=C ts=$1 m k v n=0 seen=,
  ((${#ts} <= 512)) || return 1
  [[ $ts == *[![:print:][:blank:]]* ]] && return 1
  while [[ -n $ts ]]; do
    m=${ts%%,*}
    if [[ $m == "$ts" ]]; then ts=; else ts=${ts#*,}; fi
    m=${m#"${m%%[! $'\t']*}"}
    m=${m%"${m##*[! $'\t']}"}
    [[ -z $m ]] && continue
    [[ $m == ?*=?* ]] || return 1
    k=${m%%=*}
    v=${m#*=}
    [[ $k =~ ^([a-z][a-z0-9_*/-]{0,255}|[a-z0-9][a-z0-9_*/-]{0,240}@[a-z][a-z0-9_*/-]{0,13})$ ]] || return 1
    [[ $v =~ ^[[:print:]]{0,255}[[:graph:]]$ && $v != *=* ]] || return 1
    [[ $seen == *",$k,"* ]] && return 1
    seen+=$k,
    ((++n <= 32)) || return 1
  done
  ((n > 0))
}

# --- spans ---------------------------------------------------------------------------------
_gt_push() {   # NAME KIND [K=V ...]
  if ((_gt_fast)); then   # _gt_now's and _gt_rand64's bash-5 paths
    _gt_t=${EPOCHREALTIME/[.,]/}000
    printf -v _gt_id '%08x%08x' "$SRANDOM" "$SRANDOM"
    [[ $_gt_id == 0000000000000000 ]] && _gt_rand64
  else
    _gt_now
    _gt_rand64
  fi
  _gt_text 128 "$1"
  # What is known at the start goes into the span's JSON now; _gt_pop adds the rest.
  _gt_par[_gt_n]=$_gt_cur _gt_head[_gt_n]="{\"traceId\":\"$_gt_trace\",\"spanId\":\"$_gt_id\",\"parentSpanId\":\"$_gt_cur\"$_gt_tsj,\"name\":\"$_gt_e\",\"kind\":$2,\"startTimeUnixNano\":\"$_gt_t\""
  _gt_a=
  (($# < 3)) || _gt_kvs "${@:3}"
  _gt_attrs[_gt_n]=$_gt_a _gt_cur=$_gt_id _gt_n=$((_gt_n + 1)) GWMS_TRACE_SPAN_ID=$_gt_id \
    TRACEPARENT=00-$_gt_trace-$_gt_id-01
  return 0
}

# _gt_status RC MESSAGE: _gt_pop's _gt_at (attributes) and _gt_st (status) for an RC other than "" and 0.
_gt_status() {
  case $1 in
    -[0-9]* | [0-9]*)
      if [[ ${1#-} == *[!0-9]* ]]; then
        _gt_text 1024 "$1"
      else
        _gt_at+=${_gt_at:+,}"{\"key\":\"process.exit.code\",\"value\":{\"intValue\":\"$1\"}}"
        _gt_text 1024 "${2:-exit code $1}"
      fi ;;
    *) _gt_text 1024 "$1" ;;
  esac
  _gt_st=",\"status\":{\"code\":2,\"message\":\"$_gt_e\"}"
}

# _gt_el: _gt_pop's _gt_x (events and links) for span _gt_n, whose slots it empties for the next span there.
_gt_el() {
  _gt_x="\"events\":[${_gt_events[_gt_n]-}],\"links\":[${_gt_links[_gt_n]-}]"
  _gt_events[_gt_n]='' _gt_links[_gt_n]='' _gt_elx=$((_gt_n ? _gt_n : 1))
}

# _gt_freeze: the resource is written with the first span, and from then on fixed.
_gt_freeze() {
  _gt_resj="{\"resource\":{\"attributes\":[$_gt_res]},\"scopeSpans\":[{\"scope\":{\"name\":\"gwms-trace.sh\",\"version\":\"$GWMS_TRACE_VERSION\"},\"spans\":["
  _gt_pre="{\"resourceSpans\":[$_gt_resj"
  # An inline line is _gt_pre, its head, this glue, its end time (19 digits: EPOCHREALTIME's seconds and 6
  # decimals, and 000, until 2286), its attributes (and a comma), _gt_x0, a newline; its head and attributes are at
  # most a 129-character name and value, their key and the traceState.
  local g=',"endTimeUnixNano":"","attributes":['
  _gt_lfix=$((${#_gt_pre} + ${#g} + 19 + ${#_gt_x0} + 1)) _gt_lmax=$((${#_gt_pre} + ${#_gt_tsj} + 2048))
  _gt_blimits
  _gt_gosync
}

# _gt_room: the spool's byte limit from the work dir's free space (df -Pk, bounded like a request), read at init
# and again after each MiB written: the spool may take a quarter of what is free (the flush copies it once for
# wget), and never more than GWMS_TRACE_MAX_BYTES. Without df the cap alone applies.
_gt_room() {
  local out a
  _gt_bmax=$_gt_bcap _gt_bchk=$((_gt_bytes + 1048576))
  if command -v df >/dev/null 2>&1; then
    out=$(_gt_bound 2 df -Pk -- "$_gt_sdir" 2>/dev/null) || out=
    # Available precedes Capacity ("N%"); the file system's name and the mount point may hold spaces.
    if [[ ${out#*$'\n'} =~ [[:space:]]([0-9]{1,15})[[:space:]]+[0-9]{1,3}%([[:space:]]|$) ]]; then
      a=$((10#${BASH_REMATCH[1]} * 256 + _gt_bytes))
      ((a >= _gt_bmax)) || _gt_bmax=$a
    fi
  fi
  _gt_blimits
}

_gt_blimits() {   # _gt_bres, _gt_blim, _gt_bfast from _gt_bmax and _gt_bchk
  _gt_bres=$((_gt_bmax / 4 < 65536 ? _gt_bmax / 4 : 65536))
  _gt_blim=$((_gt_bmax - _gt_bres < _gt_bchk ? _gt_bmax - _gt_bres : _gt_bchk))
  _gt_bfast=$((_gt_blim - _gt_lmax))
}

# _gt_fits LENGTH: may the innermost span's line of LENGTH bytes be written? Under the limit, less the root's
# reserve (the root may use it); free space is read again when due. A span that does not fit ends the spool:
# later spans are dropped and counted, as past GWMS_TRACE_MAX_SPANS, and the root still fits.
_gt_fits() {
  ((_gt_bytes + $1 <= _gt_bchk)) || _gt_room
  ((_gt_bytes + $1 <= (_gt_n ? _gt_bmax - _gt_bres : _gt_bmax))) && return 0
  if ((_gt_n)); then
    ((_gt_max <= _gt_spans)) ||
      echo "gwms-trace: spool at its limit ($_gt_bytes of $_gt_bmax bytes: GWMS_TRACE_MAX_BYTES or a quarter of the free space); later spans are dropped" >&2
    _gt_max=$_gt_spans
  fi
  return 1
}

# _gt_gosync: _gt_go = whether gwms_trace_begin and gwms_trace_end may take their inline case: bash 5, tracing
# on, every span recorded (commands verbosity), none suppressed, the resource written. Called wherever one changes.
_gt_gosync() {
  _gt_go=0
  ((_gt_on && _gt_fast && _gt_v > 2 && _gt_skip == 0)) && [[ -n $_gt_resj ]] && _gt_go=1
  return 0
}

# _gt_pop RC MESSAGE [UNFINISHED]: end and write the innermost span.
_gt_pop() {
  ((_gt_n > 0)) || return 0
  if ((_gt_fast)); then _gt_t=${EPOCHREALTIME/[.,]/}000; else _gt_now; fi
  _gt_n=$((_gt_n - 1))   # the span's index, from here on
  _gt_cur=${_gt_par[_gt_n]} _gt_at=${_gt_attrs[_gt_n]} _gt_st='' _gt_x='"events":[],"links":[]'
  ((_gt_n >= _gt_elx)) || _gt_el
  TRACEPARENT=00-$_gt_trace-${_gt_cur:-$_gt_root}-01
  if [[ $1 == 0 ]]; then
    _gt_at+=${_gt_at:+,}'{"key":"process.exit.code","value":{"intValue":"0"}}' _gt_st=',"status":{"code":1}'
  elif [[ -n $1 ]]; then
    _gt_status "$1" "$2"
  fi
  [[ -z ${3-} ]] || _gt_at+=${_gt_at:+,}'{"key":"gwms.trace.unfinished","value":{"boolValue":true}}'
  if ((_gt_n == 0 && _gt_dropped > 0)); then
    _gt_at+=${_gt_at:+,}"{\"key\":\"gwms.trace.dropped_spans\",\"value\":{\"intValue\":\"$_gt_dropped\"}}"
  fi
  # The root is always written, so the trace keeps its top and the dropped count.
  if ((_gt_spans >= _gt_max && _gt_n > 0)); then
    _gt_dropped=$((_gt_dropped + 1))
    return 0
  fi
  [[ -n $_gt_resj ]] || _gt_freeze
  _gt_l=$_gt_pre${_gt_head[_gt_n]},\"endTimeUnixNano\":\"$_gt_t\",\"attributes\":[$_gt_at],$_gt_x$_gt_st'}]}]}]}'
  if ((_gt_bytes + ${#_gt_l} >= _gt_blim)) && ! _gt_fits $((${#_gt_l} + 1)); then
    _gt_dropped=$((_gt_dropped + 1))
    return 0
  fi
  _gt_bytes=$((_gt_bytes + ${#_gt_l} + 1))
  printf '%s\n' "$_gt_l" 2>&- >>"$_gt_spool" || _gt_dropped=$((_gt_dropped + 1))   # 2>&-: silent, and cheaper than 2>/dev/null
  _gt_spans=$((_gt_spans + 1))
  return 0
}

gwms_trace_init() {
  [[ $- != *[ax]* ]] || { _gt_safe gwms_trace_init "$@"; return 0; }
  local tp=${TRACEPARENT-} bad='' f
  _gt_on=0 _gt_go=0
  GWMS_TRACE_RESULT=off
  [[ ${GWMS_TRACE-1} == 0 ]] && return 0
  # The factory's default verbosity; off with no controller to ask is GWMS_TRACE=0. With a
  # controller the root is kept in memory until gwms_trace_control (or flush) decides.
  _gt_level "${GWMS_TRACE_VERBOSITY-}" || _gt_lv=3
  _gt_v=$_gt_lv _gt_skip=0 _gt_rec=0 _gt_asked=0
  [[ $_gt_v == 0 && -z ${GWMS_TRACE_CONTROLLER_URL-} ]] && return 0
  if [[ -n ${EPOCHREALTIME-} && -n ${SRANDOM-} && ${GWMS_TRACE_COMPAT-} != 4 ]]; then
    _gt_fast=1
  else
    _gt_fast=0
    _gt_clock='date'
    _gt_now
    _gt_base_ns=$_gt_t
    if [[ ${GWMS_TRACE_CLOCK-} != date ]] && read -r _gt_base_cs _ </proc/uptime 2>/dev/null; then
      _gt_base_cs=${_gt_base_cs/./}
      case $_gt_base_cs in
        '' | *[!0-9]*) ;;
        *) _gt_base_cs=$((10#$_gt_base_cs)); _gt_clock=uptime ;;
      esac
    fi
    _gt_seed
  fi
  _gt_max=${GWMS_TRACE_MAX_SPANS:-10000}
  case $_gt_max in '' | *[!0-9]*) _gt_max=10000 ;; esac
  _gt_spool=${1:-${GWMS_TRACE_SPOOL:-$PWD/gwms-trace.spool.jsonl}}
  GWMS_TRACE_SPOOL=$_gt_spool
  : 2>/dev/null >"$_gt_spool" || return 0   # cannot write the spool: stay off
  _gt_bcap=${GWMS_TRACE_MAX_BYTES-}
  if [[ ! $_gt_bcap =~ ^[0-9]{1,12}$ ]] || ((10#$_gt_bcap < 4096)); then
    [[ -z $_gt_bcap ]] || echo "gwms-trace: GWMS_TRACE_MAX_BYTES is not a number of bytes from 4096 up; 8388608" >&2
    _gt_bcap=8388608
  fi
  _gt_bcap=$((10#$_gt_bcap)) _gt_bytes=0 _gt_lmax=0 _gt_sdir=.
  [[ $_gt_spool != */* ]] || _gt_sdir=${_gt_spool%/*}/
  _gt_room
  # This glidein's own token: kept in a shell variable (not exported, so payloads started
  # later do not inherit it) and the file removed from the sandbox.
  local tf=${GWMS_TRACE_TOKEN_FILE:-gwms-trace.jwt}
  _gt_tok=
  if [[ -f $tf && -r $tf ]]; then
    read -r _gt_tok <"$tf" 2>/dev/null || true
    rm -f "$tf" 2>/dev/null || true
  fi
  # W3C traceparent (version 00; later versions may append "-..."); lower-case hex only.
  if [[ -n $tp ]]; then
    if [[ $tp =~ ^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$ ]] &&
      [[ ${BASH_REMATCH[1]} != ff ]] && ! [[ ${BASH_REMATCH[1]} == 00 && -n ${BASH_REMATCH[5]} ]] &&
      [[ ${BASH_REMATCH[2]} != 00000000000000000000000000000000 && ${BASH_REMATCH[3]} != 0000000000000000 ]]; then
      f=${BASH_REMATCH[4]}
      if (((0x$f & 1) == 0)); then   # the factory decided not to sample this glidein
        return 0
      fi
      _gt_trace=${BASH_REMATCH[2]}
      _gt_rparent=${BASH_REMATCH[3]}
    else
      bad=1
    fi
  fi
  if [[ -z $_gt_rparent ]]; then
    _gt_rand64; _gt_trace=$_gt_id
    _gt_rand64; _gt_trace+=$_gt_id
  fi
  # W3C tracestate travels with its traceparent: kept, unchanged, only with the parent
  # it belongs to and only when valid; otherwise dropped, for the spans and the children.
  _gt_tsj=
  if [[ -n $_gt_rparent && -n ${TRACESTATE-} ]] && _gt_tracestate_ok "$TRACESTATE"; then
    _gt_esc "$TRACESTATE"
    _gt_tsj=",\"traceState\":\"$_gt_e\""
    export TRACESTATE
  else
    unset TRACESTATE
  fi
  # Resource, each key once: what we detect (host.name, process.pid, service.name), then the
  # user's OTEL_RESOURCE_ATTRIBUTES (k=v, comma separated, %-encoded) over it, then
  # OTEL_SERVICE_NAME over that (the OpenTelemetry precedence), and our conventions version.
  _gt_res=
  _gt_resj=
  _gt_rk=()
  _gt_rv=()
  _gt_res_add service.name glidein
  _gt_res_add host.name "${HOSTNAME-}"
  _gt_res_add process.pid "$$"
  local kv kvs=()
  [[ -n ${OTEL_RESOURCE_ATTRIBUTES-} ]] && IFS=, read -r -a kvs <<<"$OTEL_RESOURCE_ATTRIBUTES"
  for kv in ${kvs[@]+"${kvs[@]}"}; do
    [[ $kv == ?*=* ]] || continue
    _gt_pct_decode "${kv#*=}"
    _gt_res_add "${kv%%=*}" "$_gt_e"
  done
  if [[ -n ${OTEL_SERVICE_NAME-} ]]; then _gt_res_add service.name "$OTEL_SERVICE_NAME"; fi
  _gt_res_add gwms.conventions "$GWMS_TRACE_VERSION"
  _gt_n=0
  _gt_cur=$_gt_rparent
  _gt_events=() _gt_links=() _gt_elx=1
  _gt_hp="{\"traceId\":\"$_gt_trace\",\"spanId\":\"" _gt_tp=00-$_gt_trace-
  _gt_phase=-1
  _gt_spans=0
  _gt_dropped=0
  _gt_on=1
  _gt_push glidein 5
  _gt_root=$_gt_id
  if [[ -n $bad ]]; then   # said on the root span: this pilot's trace is not its factory's
    gwms_trace_attr -b gwms.trace.parent_invalid true
    gwms_trace_attr gwms.trace.parent_received "${tp:0:64}"
  fi
  GWMS_PILOT_TRACEPARENT=$TRACEPARENT
  export TRACEPARENT GWMS_PILOT_TRACEPARENT
  GWMS_TRACE_RESULT=
  return 0
}

gwms_trace_resource() {
  [[ $- != *[ax]* ]] || { _gt_safe gwms_trace_resource "$@"; return 0; }
  ((_gt_on)) || return 0
  if [[ -z $_gt_resj ]]; then
    _gt_res_add "$1" "${2-}"
  else   # the resource is already in the spool: the root span carries it instead
    _gt_typed "$1" "${2-}"
    _gt_attrs[0]+=${_gt_attrs[0]:+,}$_gt_a
  fi
  return 0
}

# A span's begin and end are what a pilot calls most (gwms_trace_script), and in bash every function
# call (which copies the function's body), every command and every expansion costs: so their common case
# is written out inline in gwms_trace_begin and gwms_trace_end, in few commands, and everything else goes
# to _gt_begin/_gt_end (_gt_push, _gt_pop), which write the same bytes (tests/test_trace_fastpath.py
# compares the two). A bash without EPOCHREALTIME (4.x) gets the general code alone, as before.
#
# gwms_trace_begin inline (_gt_go: bash 5, every span recorded, the resource written): a name and at most
# one attribute, of the key the last such span had (gwms_trace_script's gwms.script=NAME: _gt_kq), the
# two together at most 129 characters and what _gt_text would pass unchanged. That is _gt_text's test, on
# both at once ("NAME VALUE") and in two steps: the same characters (but for an upper-case I, which some
# locales lower-case to a dotless i), then the keywords as lower-case words, on the lower-cased text
# (cheaper than [Tt][Oo][Kk]). An empty name becomes "=", which fails the first step. The id is drawn
# before the test, so that the all-zero id takes the general code too.
if [[ -n ${EPOCHREALTIME-} && -n ${SRANDOM-} ]]; then   # bash >= 5
gwms_trace_begin() {
  if ((_gt_go && $# < 3)) && [[ $- != *[ax]* ]]; then   # (under set -a or -x: _gt_safe, before any assignment)
    _gt_kvp=${2-} _gt_kvp=${_gt_kvp:_gt_kl} _gt_c=${1:-=}\ $_gt_kvp
    printf -v _gt_id '%08x%08x' "$SRANDOM" "$SRANDOM"
    if [[ ${2-$_gt_kq} == "$_gt_kq"* && ${#_gt_c} -lt 130 && $_gt_c != *[!A-HJ-Za-z0-9._/\ -]* &&
      $_gt_id != 0000000000000000 ]]; then
      case ${_gt_c,,} in
        *tok* | *pas* | *pwd* | *sec* | *key* | *eyj* | *bearer* | *begin* | *x509* | *akia* | *asia* | *gh?_*)
          _gt_begin "$@"; return 0 ;;
      esac
      _gt_t=${EPOCHREALTIME/[.,]/}000 _gt_par[_gt_n]=$_gt_cur _gt_attrs[_gt_n]=${2:+$_gt_ka$_gt_kvp\"\}\}} \
        _gt_head[_gt_n]=$_gt_hp$_gt_id\",\"parentSpanId\":\"$_gt_cur\"$_gt_tsj,\"name\":\"$1\",\"kind\":1,\"startTimeUnixNano\":\"$_gt_t\" \
        _gt_cur=$_gt_id GWMS_TRACE_SPAN_ID=$_gt_id TRACEPARENT=$_gt_tp$_gt_id-01
      ((++_gt_n))
      return 0
    fi
  fi
  _gt_begin "$@"
}

# gwms_trace_end inline (_gt_go): a span below the root and not the phase, ending with 0, under the caps
# (spans, and bytes: _gt_bfast leaves room for the longest inline line), without events or links (_gt_elx >= 1:
# not the root either).
gwms_trace_end() {
  # (the conditions count the span and take it off the stack, once they hold)
  if [[ ${1-} == 0 && $- != *[ax]* ]] && ((_gt_go && _gt_n > _gt_elx && _gt_spans < _gt_max &&
    _gt_bytes < _gt_bfast && _gt_n - 1 != _gt_phase && ++_gt_spans && --_gt_n)); then
    _gt_t=${EPOCHREALTIME/[.,]/}000 _gt_cur=${_gt_par[_gt_n]} _gt_at=${_gt_attrs[_gt_n]} TRACEPARENT=$_gt_tp$_gt_cur-01 \
      _gt_bytes=$((_gt_bytes + _gt_lfix + ${#_gt_head[_gt_n]} + ${#_gt_at} + (${#_gt_at} > 0)))
    printf '%s\n' "$_gt_pre${_gt_head[_gt_n]},\"endTimeUnixNano\":\"$_gt_t\",\"attributes\":[$_gt_at${_gt_at:+,}$_gt_x0" \
      2>&- >>"$_gt_spool" || _gt_dropped=$((_gt_dropped + 1))
    return 0
  fi
  _gt_end "$@"
}
else   # bash 4: no inline case, and the general code without a call more (as _gt_begin and _gt_end)
gwms_trace_begin() {
  [[ $- != *[ax]* ]] || { _gt_safe gwms_trace_begin "$@"; return 0; }
  ((_gt_on && _gt_v > 2 && _gt_skip == 0)) || _gt_gate || return 0
  _gt_push "${1:-span}" 1 "${@:2}"
}

gwms_trace_end() {
  [[ $- != *[ax]* ]] || { _gt_safe gwms_trace_end "$@"; return 0; }
  ((_gt_on && _gt_n > 1 && _gt_skip == 0)) || { _gt_unskip; return 0; }   # the root ends in gwms_trace_flush
  ((_gt_n - 1 == _gt_phase)) && _gt_phase=-1
  _gt_pop "${1-}" "${2-}"
}
fi

# _gt_safe FUNCTION [ARG ...]: FUNCTION with the caller's allexport and xtrace off, then both as they were. Every
# public function but gwms_trace_script (whose command runs as the caller set it) goes through it when either is
# on: under `set -a` the library's variables (the glidein's token among them) would be exported to every child,
# the payload's included, and under `set -x` its tokens printed into the glidein's stderr.
_gt_safe() {
  case $- in
    *a*x* | *x*a*) set +ax; "$@"; set -ax ;;
    *a*) set +a; "$@"; set -a ;;
    *x*) set +x; "$@"; set -x ;;
    *) "$@" ;;
  esac
  return 0
}

# gwms_trace_begin's and gwms_trace_end's general code (their bodies, copied at every call, stay short).
_gt_begin() {
  [[ $- != *[ax]* ]] || { _gt_safe _gt_begin "$@"; return 0; }
  ((_gt_on && _gt_v > 2 && _gt_skip == 0)) || _gt_gate || return 0
  _gt_push "${1:-span}" 1 "${@:2}"
  ((!_gt_fast || $# != 2)) || _gt_kqset "${2%%=*}"   # the next span with this key may be inline
}

_gt_end() {
  [[ $- != *[ax]* ]] || { _gt_safe _gt_end "$@"; return 0; }
  ((_gt_on && _gt_n > 1 && _gt_skip == 0)) || { _gt_unskip; return 0; }   # the root ends in gwms_trace_flush
  ((_gt_n - 1 == _gt_phase)) && _gt_phase=-1
  _gt_pop "${1-}" "${2-}"
}

# _gt_gate: may a span begin here below the commands level? Spans directly under a phase or the
# root are scripts level, deeper ones commands level; a suppressed span's children are suppressed
# too, and each is counted so that its gwms_trace_end ends nothing.
_gt_gate() {
  ((_gt_on)) || return 1
  if ((_gt_skip == 0 && _gt_v >= ((_gt_n == 1 || _gt_n - 1 == _gt_phase) ? 2 : 3))); then
    return 0
  fi
  _gt_skip=$((_gt_skip + 1)) _gt_go=0
  return 1
}

_gt_unskip() {   # the end of a suppressed span
  ((_gt_on && _gt_skip > 0)) && _gt_skip=$((_gt_skip - 1)) && _gt_gosync
  return 0
}

gwms_trace_phase() {
  [[ $- != *[ax]* ]] || { _gt_safe gwms_trace_phase "$@"; return 0; }
  ((_gt_on && _gt_v > 0)) || return 0
  gwms_trace_phase_end ''
  _gt_push "${1:-phase}" 1 "gwms.phase=${1:-phase}"
  _gt_phase=$((_gt_n - 1))
}

gwms_trace_phase_end() {
  [[ $- != *[ax]* ]] || { _gt_safe gwms_trace_phase_end "$@"; return 0; }
  ((_gt_on && _gt_phase > 0)) || return 0
  while ((_gt_n - 1 > _gt_phase)); do
    _gt_pop "" "" unfinished
  done
  _gt_phase=-1 _gt_skip=0   # suppressed spans inside the phase end with it
  _gt_gosync
  _gt_pop "${1-}" ""
}

# No variable of its own (a local would be exported to CMD under `set -a`): the status goes through `set --`.
gwms_trace_script() {
  gwms_trace_begin "$1" "gwms.script=$1"
  ((_gt_rec == 0)) || _gt_cmd "${@:2}"
  "${@:2}"
  set -- "$?"
  gwms_trace_end "$1"
  return "$1"
}

# _gt_cmd CMD ...: what a controller's answer lets gwms_trace_script record of its command: the
# executable's name, and the whole (masked) command line only with record_commands.
_gt_cmd() {
  ((_gt_on && _gt_skip == 0)) || return 0
  gwms_trace_attr process.executable.name "${1##*/}"
  ((_gt_rec < 2)) || gwms_trace_attr process.command_line "$*"
}

gwms_trace_attr() {
  [[ $- != *[ax]* ]] || { _gt_safe gwms_trace_attr "$@"; return 0; }
  ((_gt_on && _gt_n > 0 && _gt_skip == 0)) || return 0   # a suppressed span's attributes go nowhere
  local t=s
  case ${1-} in -i) t=i; shift ;; -b) t=b; shift ;; -d) t=d; shift ;; esac
  _gt_kv "${1-}" "${2-}" "$t"
  local i=$((_gt_n - 1))
  _gt_attrs[i]+=${_gt_attrs[i]:+,}$_gt_a
  return 0
}

gwms_trace_event() {
  [[ $- != *[ax]* ]] || { _gt_safe gwms_trace_event "$@"; return 0; }
  ((_gt_on && _gt_n > 0 && _gt_skip == 0)) || return 0
  local i=$((_gt_n - 1))
  _gt_now
  _gt_text 128 "${1:-event}"
  local name=$_gt_e
  _gt_kvs "${@:2}"
  _gt_events[i]+=${_gt_events[i]:+,}"{\"timeUnixNano\":\"$_gt_t\",\"name\":\"$name\",\"attributes\":[$_gt_a]}"
  ((i < _gt_elx)) || _gt_elx=$((i + 1))
  return 0
}

gwms_trace_link() {
  [[ $- != *[ax]* ]] || { _gt_safe gwms_trace_link "$@"; return 0; }
  ((_gt_on && _gt_n > 0 && _gt_skip == 0)) || return 0
  [[ ${1-} =~ ^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$ ]] || return 0
  local i=$((_gt_n - 1)) t=${BASH_REMATCH[1]} s=${BASH_REMATCH[2]}
  _gt_kvs "${@:2}"
  _gt_links[i]+=${_gt_links[i]:+,}"{\"traceId\":\"$t\",\"spanId\":\"$s\",\"attributes\":[$_gt_a]}"
  ((i < _gt_elx)) || _gt_elx=$((i + 1))
  return 0
}

# --- monitoring controller -----------------------------------------------------------------------
# _gt_level NAME: _gt_lv = NAME's verbosity as a number; returns 1 (and leaves _gt_lv) for anything else.
_gt_level() {
  case $1 in
    off) _gt_lv=0 ;;
    phases) _gt_lv=1 ;;
    scripts) _gt_lv=2 ;;
    commands) _gt_lv=3 ;;
    *) return 1 ;;
  esac
}

# _gt_discard: this glidein is not traced after all. The root (and anything ended) is dropped;
# nothing is sent or framed; the children get the factory's context unsampled (flags 00), or none.
_gt_discard() {
  : 2>/dev/null >"$_gt_spool" || true
  _gt_bytes=0
  _gt_on=0 _gt_go=0 _gt_n=0 _gt_phase=-1 _gt_skip=0 _gt_cur=
  GWMS_TRACE_RESULT=off
  unset GWMS_PILOT_TRACEPARENT
  if [[ -n $_gt_rparent ]]; then
    TRACEPARENT=00-$_gt_trace-$_gt_rparent-00
    export TRACEPARENT
  else
    unset TRACEPARENT
  fi
  return 0
}

# _gt_urlenc STRING: _gt_e = STRING percent-encoded (RFC 3986: unreserved characters kept), byte-wise.
_gt_urlenc() {
  local LC_ALL=C s=$1 out='' c i
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    case $c in
      [A-Za-z0-9._~-]) out+=$c ;;
      *) printf -v c '%02X' "'$c"; out+=%${c: -2} ;;   # a byte >= 0x80 may print sign-extended
    esac
  done
  _gt_e=$out
}

# --- requests: the controller's GET and the spans' POST ----------------------------------------------
# Both go through _gt_req: one wall-clock bound on the whole request, whatever the client, and headers that
# reach the client only as config lines it reads from stdin (curl) or a 0600 file (wget), each checked so
# that it cannot add a line: no client option or header comes from the environment unchecked.

# _gt_tmo VALUE DEFAULT NAME: _gt_to = VALUE, seconds, if it is a bound (0 < VALUE <= 60, at most 3 decimals;
# curl reads 0 as "no limit"), else DEFAULT, said on stderr when VALUE was set.
_gt_tmo() {
  _gt_to=$1
  if [[ $_gt_to =~ ^[0-9]{1,2}([.][0-9]{1,3})?$ && ! $_gt_to =~ ^0*([.]0*)?$ ]] &&
    ((10#${_gt_to%%.*} < 60)) || [[ $_gt_to =~ ^60([.]0*)?$ ]]; then
    return 0
  fi
  [[ -z $_gt_to ]] || echo "gwms-trace: $3 is not a number of seconds in (0, 60]; $2" >&2
  _gt_to=$2
}

# _gt_urlok URL: an http(s) URL with nothing a command line or config could read as more.
_gt_urlok() {
  [[ $1 =~ ^https?://[^[:space:][:cntrl:]\"\\]+$ ]]
}

# _gt_hadd NAME VALUE: add the header to _gt_hl if NAME is an HTTP token and VALUE printable ASCII without '"'
# and '\' (the characters that would end or escape a config line's quoted value, or start another line).
_gt_hre='^[-A-Za-z0-9!#$%&'"'"'*+.^_`|~]{1,64}$'
_gt_hadd() {
  local LC_ALL=C
  [[ $1 =~ $_gt_hre && $2 != *[!\ -~]* && $2 != *[\"\\]* && ${#2} -le 8192 ]] || return 1
  _gt_hl+=("$1: $2")
}

# _gt_bearer TOKEN WHAT: Authorization: Bearer TOKEN in _gt_hl, if TOKEN has only a token's characters (RFC 6750);
# else none, and stderr says so (never the token).
_gt_bearer() {
  [[ -n $1 ]] || return 0
  if [[ ${#1} -le 16384 && $1 =~ ^[A-Za-z0-9._~+/=-]+$ ]]; then
    _gt_hl+=("Authorization: Bearer $1")
  else
    echo "gwms-trace: $2 not sent: it has characters a bearer token cannot have" >&2
  fi
  return 0
}

# _gt_conf curl|wget: _gt_hl as the client's config lines.
_gt_conf() {
  local h
  for h in ${_gt_hl[@]+"${_gt_hl[@]}"}; do
    if [[ $1 == curl ]]; then printf 'header = "%s"\n' "$h"; else printf 'header = %s\n' "$h"; fi
  done
}

# _gt_bound SECONDS CMD ...: CMD, killed after SECONDS (status 124 then): timeout(1), or where there is none a
# watchdog subshell that sleeps with the builtin read (no other program needed) and kills CMD.
_gt_bound() {
  local to=$1 pid wd rc=0
  shift
  if command -v timeout >/dev/null 2>&1; then
    timeout "$to" "$@" || rc=$?
    return "$rc"
  fi
  "$@" <&0 &
  pid=$!
  (
    read -rt "$to" <> <(:) || true
    kill -TERM "$pid" 2>/dev/null && { read -rt 1 <> <(:) || true; kill -KILL "$pid" 2>/dev/null; }
  ) >/dev/null 2>&1 </dev/null &
  wd=$!
  wait "$pid" || rc=$?
  kill "$wd" 2>/dev/null || true
  wait "$wd" 2>/dev/null || true
  ((rc != 143 && rc != 137)) || rc=124
  return "$rc"
}

# _gt_req URL SECONDS CONNECT_SECONDS [BODY_FILE]: one request, a GET or the POST of BODY_FILE, with the headers
# of _gt_hl, bounded by SECONDS in all; the answer's body on stdout, the client's status returned (124, or
# curl's 28: out of time; 22 or wget's 8: an HTTP error; 47 or 8: a redirect, never followed). No user config is read.
_gt_req() {
  local url=$1 to=$2 ct=$3 body=${4-} rc=0 cfg a
  _gt_urlok "$url" || return 2
  if command -v curl >/dev/null 2>&1; then
    a=(-q -sS --fail --proto '=http,https' -L --max-redirs 0 --connect-timeout "$ct" --max-time "$to" -o - -K -)
    [[ -z $body ]] || a+=(--data-binary "@$body")
    _gt_conf curl | _gt_bound "$to" curl "${a[@]}" --url "$url" || rc=$?
  elif command -v wget >/dev/null 2>&1; then
    cfg=$_gt_spool.wgetrc   # wget reads its config only from a regular file
    rm -f "$cfg" 2>/dev/null || true
    if ! (umask 077 && set -C && _gt_conf wget >"$cfg") 2>/dev/null; then
      rm -f "$cfg" 2>/dev/null || true
      echo "cannot write $cfg" >&2
      return 1
    fi
    # wget's --timeout bounds each read (a backstop, after the bound: a timeout is then always 124)
    a=(-q -O - --config="$cfg" --timeout=$((10#${to%%.*} + 1)) --tries=1 --max-redirect=0)
    [[ -z $body ]] || a+=(--post-file="$body")
    _gt_bound "$to" wget "${a[@]}" -- "$url" || rc=$?
    rm -f "$cfg" 2>/dev/null || true
  else
    echo "no curl or wget" >&2
    return 1
  fi
  return "$rc"
}

# The answer's one accepted shape: GET /v1/decide's flat object, keys in the contract's order, any JSON
# white space. Groups: 1 verbosity, 4 record_commands, 5 sample_threshold, 6 rule, 7 kind.
_gt_w='[[:space:]]*'
_gt_ctl_re="^${_gt_w}[{]$_gt_w\"verbosity\"$_gt_w:$_gt_w\"(off|phases|scripts|commands)\"$_gt_w,$_gt_w\"sample\"$_gt_w:$_gt_w"
_gt_ctl_re+="-?[0-9]{1,20}([.][0-9]{1,20})?([eE][+-]?[0-9]{1,3})?$_gt_w,$_gt_w\"record_commands\"$_gt_w:$_gt_w(true|false)"
_gt_ctl_re+="$_gt_w,$_gt_w\"sample_threshold\"$_gt_w:$_gt_w([0-9]{1,17})$_gt_w,$_gt_w\"rule\"$_gt_w:$_gt_w([0-9]{1,18}|null)"
_gt_ctl_re+="$_gt_w,$_gt_w\"kind\"$_gt_w:$_gt_w\"(default|vo|site|operator)\"$_gt_w,$_gt_w\"capped_by\"$_gt_w:$_gt_w"
_gt_ctl_re+="[[]${_gt_w}([0-9]{1,18}($_gt_w,${_gt_w}[0-9]{1,18}){0,63})?${_gt_w}[]]${_gt_w}[}]$_gt_w\$"
_gt_ctl_max=4096    # bytes of an answer at most (a real one is ~150)

# _gt_ask URL K=V ...: one bounded GET of URL/v1/decide. Sets _gt_cr (answered | timeout | error) and,
# answered, BASH_REMATCH per _gt_ctl_re. The answer is hostile input: at most _gt_ctl_max bytes are read.
_gt_ask() {
  local url=${1%/} q='' k v kv out rc f tok=''
  shift
  _gt_cr=error
  _gt_urlok "$url" || return 0
  _gt_tmo "${GWMS_TRACE_CONTROLLER_TIMEOUT-}" 2 GWMS_TRACE_CONTROLLER_TIMEOUT
  for k in factory entry site frontend security_class pilot; do
    v=''
    for kv in "$@"; do
      [[ $kv == "$k="* ]] && v=${kv#*=}
    done
    _gt_urlenc "${v:0:256}"
    q+=${q:+&}$k=$_gt_e
  done
  url+="/v1/decide?$q"
  command -v head >/dev/null 2>&1 || return 0   # no way to bound the read
  # The token: the file's first line, else GWMS_TRACE_CONTROLLER_TOKEN.
  f=${GWMS_TRACE_CONTROLLER_TOKEN_FILE-}
  [[ -n $f && -r $f ]] && { read -r tok <"$f" 2>/dev/null || true; }
  [[ -n $tok ]] || tok=${GWMS_TRACE_CONTROLLER_TOKEN-}
  _gt_hl=("Accept: application/json")
  _gt_bearer "$tok" "the controller token"
  tok=
  out=$(
    set +e
    _gt_req "$url" "$_gt_to" "$_gt_to" 2>/dev/null | head -c $((_gt_ctl_max + 8)) 2>/dev/null
    printf '\n%s' "${PIPESTATUS[0]}"
  ) || true
  _gt_hl=()
  rc=${out##*$'\n'}
  out=${out%$'\n'*}
  case $rc in
    0) ;;
    28 | 124) _gt_cr=timeout; return 0 ;;   # curl's and timeout(1)'s "timed out"
    *) return 0 ;;
  esac
  [[ ${#out} -le $_gt_ctl_max && $out =~ $_gt_ctl_re ]] || return 0
  ((10#${BASH_REMATCH[5]} <= 72057594037927936)) || return 0   # the threshold is out of 2^56
  _gt_cr=answered
}

# _gt_root_attr [-i] KEY VALUE: an attribute on the root span, whatever span is open.
_gt_root_attr() {
  if [[ $1 == -i ]]; then _gt_kv "$2" "$3" i; else _gt_kv "$1" "$2"; fi
  _gt_attrs[0]+=${_gt_attrs[0]:+,}$_gt_a
}

gwms_trace_control() {
  [[ $- != *[ax]* ]] || { _gt_safe gwms_trace_control "$@"; return 0; }
  ((_gt_on && _gt_asked == 0)) || return 0   # asked once per glidein; off pilots never ask
  _gt_asked=1
  local kind='' rule='' thr
  _gt_cr=unconfigured
  [[ -z ${GWMS_TRACE_CONTROLLER_URL-} ]] || _gt_ask "$GWMS_TRACE_CONTROLLER_URL" "$@"
  if [[ $_gt_cr == answered ]]; then
    _gt_level "${BASH_REMATCH[1]}"
    kind=${BASH_REMATCH[7]} rule=${BASH_REMATCH[6]} thr=$((10#${BASH_REMATCH[5]}))
    _gt_v=$_gt_lv
    if [[ ${BASH_REMATCH[4]} == true ]]; then _gt_rec=2; else _gt_rec=1; fi
    # Sampling is the trace root's decision (as ParentBased samplers do): a glidein continuing the
    # factory's sampled trace keeps it, and only a trace begun here is sampled, on the same 56 bits
    # of the trace id policy.sampled reads, so every glidein of a cluster decides alike.
    if [[ -z $_gt_rparent ]] && ((16#${_gt_trace:18:14} >= thr)); then
      _gt_v=0
    fi
  fi
  _gt_gosync
  # Suppressed spans open before the answer stay counted: their ends still match.
  if ((_gt_v == 0)); then
    _gt_discard
    return 0
  fi
  local names=(off phases scripts commands)
  _gt_root_attr gwms.trace.verbosity "${names[_gt_v]}"
  _gt_root_attr gwms.controller.result "$_gt_cr"
  [[ -z $kind ]] || _gt_root_attr gwms.controller.kind "$kind"
  [[ -z $rule || $rule == null ]] || _gt_root_attr -i gwms.controller.rule "$((10#$rule))"
  return 0
}

# --- flush -------------------------------------------------------------------------------------
gwms_trace_flush() {
  [[ $- != *[ax]* ]] || { _gt_safe gwms_trace_flush "$@"; return 0; }
  ((_gt_on)) || return 0
  if ((_gt_v == 0)); then   # off by default and never told otherwise
    _gt_discard
    return 0
  fi
  _gt_skip=0
  local rc=${1-} inner=
  [[ -n $rc && $rc != 0 ]] && inner=$rc   # spans cut short by a failure share it; else unset
  while ((_gt_n > 1)); do
    _gt_pop "$inner" "" unfinished
  done
  _gt_pop "$rc" ""
  _gt_on=0 _gt_go=0
  _gt_phase=-1
  if [[ ! -s $_gt_spool ]]; then
    GWMS_TRACE_RESULT=empty
    return 0
  fi
  local ep=${OTEL_EXPORTER_OTLP_TRACES_ENDPOINT-} why
  [[ -z $ep && -n ${OTEL_EXPORTER_OTLP_ENDPOINT-} ]] && ep=${OTEL_EXPORTER_OTLP_ENDPOINT%/}/v1/traces
  [[ -z $ep ]] || _gt_headers
  if [[ -z $ep ]]; then
    why="no endpoint"
  elif ! _gt_urlok "$ep"; then
    why="the endpoint is not an http(s) URL"
  elif why=$(_gt_post "$ep" 2>&1); then
    _gt_hl=() _gt_tok=
    GWMS_TRACE_RESULT=sent
    echo "gwms-trace: $_gt_spans spans sent" >&2
    return 0
  fi
  _gt_hl=() _gt_tok=
  why=${why//$'\n'/; }   # one log line
  if _gt_frame >&2; then
    GWMS_TRACE_RESULT=stderr
    echo "gwms-trace: $_gt_spans spans returned in stderr (${why:-send failed})" >&2
  else
    GWMS_TRACE_RESULT=kept
    echo "gwms-trace: spans kept in $_gt_spool (no gzip/base64)" >&2
  fi
  return 0
}

# The spool as one ExportTraceServiceRequest (OTLP/HTTP takes one per request).
_gt_body() {
  local line sep=
  printf '{"resourceSpans":['
  while IFS= read -r line || [[ -n $line ]]; do
    [[ $line == '{"resourceSpans":['*']}' ]] || continue   # a line cut by a killed pilot
    line=${line#'{"resourceSpans":['}
    printf '%s%s' "$sep" "${line%']}'}"
    sep=,
  done <"$_gt_spool"
  printf ']}\n'
}

# _gt_headers: the POST's headers in _gt_hl (the token never on a command line, so never in `ps`), and
# GWMS_TRACE_TIMEOUT in _gt_to; what is refused is said on stderr.
_gt_headers() {
  local kv kvs=() h
  _gt_tmo "${GWMS_TRACE_TIMEOUT-}" 5 GWMS_TRACE_TIMEOUT
  _gt_hl=("Content-Type: application/json")
  if [[ -n $_gt_tok ]]; then
    _gt_bearer "$_gt_tok" "the glidein's token"
  else
    _gt_bearer "${GWMS_TRACE_TOKEN-}" GWMS_TRACE_TOKEN
  fi
  h=${OTEL_EXPORTER_OTLP_TRACES_HEADERS-${OTEL_EXPORTER_OTLP_HEADERS-}}
  [[ -n $h ]] && IFS=, read -r -a kvs <<<"$h"
  for kv in ${kvs[@]+"${kvs[@]}"}; do
    _gt_pct_decode "${kv#*=}"
    [[ $kv == ?*=* ]] && _gt_hadd "${kv%%=*}" "$_gt_e" ||
      echo "gwms-trace: a header of OTEL_EXPORTER_OTLP_(TRACES_)HEADERS not sent: not NAME=VALUE, or characters a header cannot have" >&2
  done
  return 0
}

_gt_post() {
  local ep=$1 body=$_gt_spool.request.json rc=0
  _gt_body >"$body" 2>/dev/null || { rm -f "$body" 2>/dev/null; echo "cannot write $body"; return 1; }
  _gt_req "$ep" "$_gt_to" 2 "$body" >/dev/null || rc=$?
  rm -f "$body" 2>/dev/null
  ((rc == 0)) || echo "exit code $rc"
  return "$rc"
}

# The condor_startup.sh framing (exporters/gwms_obs/sources/condor_sections.py).
_gt_frame() {
  command -v gzip >/dev/null 2>&1 && command -v base64 >/dev/null 2>&1 || return 1
  printf 'GWMSTraceSpool\n======== gzip | uuencode =============\nbegin-base64 644 -\n'
  gzip -c <"$_gt_spool" | base64
  printf '====\n'
}

((_gt_sa == 0)) || set -a   # as the sourcing script had it
