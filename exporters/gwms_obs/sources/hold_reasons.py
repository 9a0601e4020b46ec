"""A glidein's hold, as one of a few fixed classes: from its HoldReasonCode, SubCode and reason text.

The reason text is hostile (the CE's and the pilot's words) and unbounded, so it
never becomes a label; its class does. The classes come from what HTCondor
documents and writes, not from guesses:

* HoldReasonCode (HTCondor manual, "Hold Reason Codes", docs/codes-other-values/
  hold-table.rst; the enum CONDOR_HOLD_CODE in src/condor_utils/condor_holdcodes.h):
  1 UserRequest and 15 SubmittedOnHold are ``user``; 3 JobPolicy, 5
  JobPolicyUndefined, 26 SystemPolicy, 27 SystemPolicyUndefined, 46
  JobDurationExceeded and 47 JobExecuteExceeded are ``periodic_hold`` (their text is
  UserPolicy::FiringReason's "The job attribute PeriodicHold expression '...' evaluated
  to TRUE", src/condor_utils/user_job_policy.cpp); 4 CorruptedCredential ("The
  credentials for the job (e.g. X509 proxy file) are invalid": "Job credentials are not
  available", "Proxy about to expire") is ``proxy_expired``; 11 InvalidTransferAck, 12
  TransferOutputError, 13 TransferInputError and 18 InvalidTransferGoAhead are
  ``transfer_failed``. A hold the CE itself made comes back with the CE's code
  (condorjob.cpp ProcessRemoteAd: JobHeld(reason, code, subcode)), so these apply there too.
* The grid errors. HTCondor-G's gridmanager holds a grid job with code 0 Unspecified
  (BaseJob::JobHeld's default; condorjob.cpp GM_HOLD: the GAHP's error string, else
  "Unspecified gridmanager error"); code 2 GlobusGramError is the retired GRAM
  gatekeeper's. For these the text decides. The HTCondor-C GAHP writes "Error connecting
  to schedd <ce>: <errors>", "Error locating schedd <ce>", "Network error talking to
  schedd, probably an authorization failure", "ERROR: Failed to submit job.  <errors>",
  "Number of submitted jobs would exceed MAX_JOBS_...", "Unable to create a new job
  cluster" (src/condor_c-gahp/schedd_client.cpp); <errors> is CondorError::getFullText,
  "SUBSYS:code:message|..." with the codes of src/condor_includes/condor_error_codes.h
  (AUTHENTICATE:1003 "Failed to authenticate with any method", SECMAN:2010
  authorization failed, CEDAR:6001 "Failed to connect to <addr>", SECMAN:2003 connect
  failed, CEDAR:6008 deadline expired; the schedd's "QMGMT:2:Submit requirement X not
  met"). An expired token is named by jwt-cpp's "token expired", which HTCondor's
  SciTokens check wraps as "SCITOKENS:2:Failed to deserialize scitoken: token expired"
  (condor_scitokens.cpp); that is the CE's side, so a factory sees it only where the CE's
  error reaches the hold reason, and otherwise the same refusal is ``auth_failed``. An
  expired proxy is condor_submit's "proxy has expired" (submit_utils.cpp).

Anything else is ``other`` (an unknown code is never a new class).
"""

from __future__ import annotations

import re
from typing import Final

from ..catalogue import HoldClass

__all__ = ["HoldClass", "classify"]


# HoldReasonCode -> class (condor_holdcodes.h); 0, 2 and a missing code are read by their text.
_BY_CODE: Final[dict[int, HoldClass]] = {
    1: HoldClass.USER,
    15: HoldClass.USER,
    3: HoldClass.PERIODIC_HOLD,
    5: HoldClass.PERIODIC_HOLD,
    26: HoldClass.PERIODIC_HOLD,
    27: HoldClass.PERIODIC_HOLD,
    46: HoldClass.PERIODIC_HOLD,
    47: HoldClass.PERIODIC_HOLD,
    4: HoldClass.PROXY_EXPIRED,
    11: HoldClass.TRANSFER_FAILED,
    12: HoldClass.TRANSFER_FAILED,
    13: HoldClass.TRANSFER_FAILED,
    18: HoldClass.TRANSFER_FAILED,
}
_BY_TEXT: Final[tuple[int | None, ...]] = (0, 2, None)

# In this order: an authentication failure is also "Error connecting to schedd", an expired
# token also fails authentication.
_TEXT: Final[tuple[tuple[HoldClass, re.Pattern[str]], ...]] = (
    (HoldClass.TOKEN_EXPIRED, re.compile(r"token[^|\n]{0,40}\bexpired\b", re.I)),
    (HoldClass.PROXY_EXPIRED, re.compile(r"proxy[^|\n]{0,40}\bexpir", re.I)),
    (
        HoldClass.AUTH_FAILED,
        re.compile(
            r"AUTHENTICATE:\d|SECMAN:20(?:08|09|10):|GSI:\d|Failed to authenticate|probably an authorization failure"
            r"|Permission denied|Failed to provide GAHP with token",
        ),
    ),
    (
        HoldClass.CE_UNREACHABLE,
        re.compile(
            r"CEDAR:600[18]:|SECMAN:2003:|Error locating schedd|Network error talking to schedd|Failed to connect to"
            r"|Error connecting to schedd"
        ),
    ),
    (
        HoldClass.CE_REFUSED,
        re.compile(
            r"Failed to submit job|Submit requirement \S+ not met|would exceed MAX_JOBS|Unable to create a new job"
        ),
    ),
)
MAX_TEXT: Final = 2000  # characters of a reason read (the event log keeps 500)


def classify(code: int | None, subcode: int | None, text: str | None) -> HoldClass:
    """The class of one hold; ``subcode`` does not change a class today (it refines a code:
    an errno, a GRAM error, a plug-in's exit) but is taken so that a caller passes all three."""
    del subcode
    by_code = _BY_CODE.get(code) if code is not None else None
    if by_code is HoldClass.PROXY_EXPIRED and text and _TEXT[0][1].search(text[:MAX_TEXT]):
        return HoldClass.TOKEN_EXPIRED  # code 4 for a token: the credential is a token
    if by_code is not None:
        return by_code
    if code in _BY_TEXT and text:
        t = text[:MAX_TEXT]
        for cls, pattern in _TEXT:
            if pattern.search(t):
                return cls
    return HoldClass.OTHER
