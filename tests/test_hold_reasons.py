"""Hold classes from real HTCondor hold text: each reason is written as the HTCondor source
writes it (the file is named beside each), read through the event-log reader as a 012 event
(JobHeldEvent::formatBody), then classified."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.sources import condor_event_log as el
from gwms_obs.sources.hold_reasons import HoldClass, classify

CE = "ce01.example.org ce01.example.org:9619"
CONNECT = f"Error connecting to schedd {CE}:"  # schedd_client.cpp "Error connecting to schedd %s %s: %s"
CASES: list[tuple[HoldClass, int, int, str]] = [
    # condor_c-gahp/schedd_client.cpp: "ERROR: Failed to submit job" + ".  " + getFullText();
    # the schedd's checkSubmitRequirements pushes QMGMT:2 "Submit requirement %s not met."
    (HoldClass.CE_REFUSED, 0, 0, "ERROR: Failed to submit job.  QMGMT:2:Submit requirement OnlyPilots not met."),
    (HoldClass.CE_REFUSED, 0, 0, "Number of submitted jobs would exceed MAX_JOBS_PER_OWNER"),
    (HoldClass.CE_REFUSED, 0, 0, "Unable to create a new job cluster"),
    # schedd_client.cpp "Error connecting to schedd %s: %s" with CEDAR_ERR_CONNECT_FAILED (6001)
    (
        HoldClass.CE_UNREACHABLE,
        0,
        0,
        f"{CONNECT} CEDAR:6001:Failed to connect to <192.0.2.7:9619>",
    ),
    (HoldClass.CE_UNREACHABLE, 0, 0, f"Error locating schedd {CE}"),
    (
        HoldClass.CE_UNREACHABLE,
        0,
        0,
        f"{CONNECT} SECMAN:2003:TCP connection to <192.0.2.7:9619> failed.",
    ),
    # AUTHENTICATE_ERR_OUT_OF_METHODS (1003) / _METHOD_FAILED (1004), as condor_rm prints them too
    (
        HoldClass.AUTH_FAILED,
        0,
        0,
        f"Error connecting to schedd {CE}: AUTHENTICATE:1003:Failed to authenticate with any method"
        "|AUTHENTICATE:1004:Failed to authenticate using SCITOKENS",
    ),
    (HoldClass.AUTH_FAILED, 0, 0, "Network error talking to schedd, probably an authorization failure"),
    (HoldClass.AUTH_FAILED, 0, 0, "Failed to provide GAHP with token"),  # condorjob.cpp GM_INIT
    (HoldClass.AUTH_FAILED, 0, 0, f'Error connecting to schedd {CE}: SECMAN:2010:Received "DENIED" from server'),
    # condor_scitokens.cpp pushf("SCITOKENS", 2, "Failed to deserialize scitoken: %s") with jwt-cpp's "token expired"
    (
        HoldClass.TOKEN_EXPIRED,
        0,
        0,
        f"Error connecting to schedd {CE}: AUTHENTICATE:1003:Failed to authenticate with any method"
        "|SCITOKENS:2:Failed to deserialize scitoken: token expired",
    ),
    # CorruptedCredential (4): NTreceivers.cpp, jic_shadow.cpp; submit_utils.cpp "proxy has expired"
    (HoldClass.PROXY_EXPIRED, 4, 0, "Job credentials are not available"),
    (HoldClass.PROXY_EXPIRED, 4, 0, "Proxy about to expire"),
    (HoldClass.PROXY_EXPIRED, 0, 0, "proxy has expired"),
    # UserPolicy::FiringReason (user_job_policy.cpp): JobPolicy 3, SystemPolicy 26, JobPolicyUndefined 5
    (HoldClass.PERIODIC_HOLD, 3, 0, "The job attribute PeriodicHold expression 'NumJobStarts > 1' evaluated to TRUE"),
    (HoldClass.PERIODIC_HOLD, 26, 0, "The system macro SYSTEM_PERIODIC_HOLD expression 'x' evaluated to TRUE"),
    (HoldClass.PERIODIC_HOLD, 5, 0, "The job attribute PeriodicHold expression 'y' evaluated to UNDEFINED"),
    (HoldClass.PERIODIC_HOLD, 46, 0, "The job exceeded allowed job duration of 2+00:00:00"),
    # TransferOutputError 12 (subcode: errno), TransferInputError 13
    (HoldClass.TRANSFER_FAILED, 12, 2, "Error from slot1@ce-1: Failed to transfer files"),
    (HoldClass.TRANSFER_FAILED, 13, 110, "Transfer input files failure at access point ce01 while sending files"),
    # schedd.cpp: condor_hold's reason + " (by user <owner>)"
    (HoldClass.USER, 1, 0, "via condor_hold (by user fefermilab)"),
    (HoldClass.USER, 15, 0, "submitted on hold at user's request"),
    # everything else: never a new class
    (HoldClass.OTHER, 0, 0, "Unspecified gridmanager error"),  # condorjob.cpp GM_HOLD's last resort
    (HoldClass.OTHER, 34, 102, "Job has gone over memory limit of 2048 megabytes."),
    (HoldClass.OTHER, 6, 13, "Error from slot1@wn: Failed to execute '/bin/x': (errno=13: 'Permission denied')"),
    (HoldClass.OTHER, 999, 5, "a code HTCondor does not have yet"),
    (HoldClass.OTHER, 0, 0, "Reason unspecified"),
]


def _held_event(code: int, sub: int, reason: str) -> el.CondorEvent:
    buf = f"012 (77.000.000) 2026-06-01 10:00:00 Job was held.\n\t{reason}\n\tCode {code} Subcode {sub}\n...\n".encode()
    errors = ParseErrors()
    (e,), _ = el.parse_buffer(buf, "/x/entry_E/condor_activity_20260601_fe.log", 0, errors)
    assert not errors.counts
    return e


@pytest.mark.parametrize(("want", "code", "sub", "reason"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_class_of_real_hold_text(want: HoldClass, code: int, sub: int, reason: str) -> None:
    e = _held_event(code, sub, reason)
    assert (e.reason_code, e.reason_subcode, e.reason) == (code, sub, reason)
    assert classify(e.reason_code, e.reason_subcode, e.reason) is want


def test_every_class_has_a_case() -> None:
    assert {c[0] for c in CASES} == set(HoldClass)


def test_codes_decide_before_text() -> None:
    # A transfer error whose text names an authentication failure stays a transfer error.
    assert classify(12, 0, "AUTHENTICATE:1003:Failed to authenticate with any method") is HoldClass.TRANSFER_FAILED
    # A hold without its codes line (an old writer) is read by its text.
    assert classify(None, None, f"Error locating schedd {CE}") is HoldClass.CE_UNREACHABLE
    assert classify(None, None, None) is HoldClass.OTHER
    assert classify(4, 0, "SciToken token expired") is HoldClass.TOKEN_EXPIRED


@given(st.one_of(st.none(), st.integers()), st.one_of(st.none(), st.integers()), st.one_of(st.none(), st.text()))
def test_any_input_has_a_class(code: int | None, sub: int | None, text: str | None) -> None:
    assert classify(code, sub, text) in set(HoldClass)
