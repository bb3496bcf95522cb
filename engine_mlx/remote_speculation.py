"""What a remote server says about its speculation, as (steps, drafted, accepted): the numbers
``stats`` turns into tau (tokens per target step, the step's own token included) and
acceptance (accepted / drafted).

Each server says it its own way, and most only in part:

- FlashChat's ``flashchat`` object: all three, exact.
- llama.cpp's ``timings``: ``draft_n`` and ``draft_n_accepted``; steps derived.
- vLLM 0.29+ with ``--per-request-spec-decode-metrics``: ``metrics.speculative_decoding`` on
  the usage chunk; drafted and accepted exact, steps derived (``num_spec_steps`` leaves out
  the prefill step and steps that drafted nothing).
- vLLM without it: the Prometheus counters on ``/metrics``, read before and after the reply.
  They are the whole server's, so they are this reply's only while nothing else runs there.
- SGLang: ``sglext.spec_tokens_details`` (``return_spec_tokens_details``) or, not streamed,
  ``choices[].meta_info`` (``return_meta_info``): steps (``spec_verify_ct``) exact, the rest
  exact where the server names it, else derived.

Only parsing lives here (no HTTP): ``remote`` fetches, this reads.
"""

from __future__ import annotations

import math
import re
from typing import Any

Counts = tuple[int, int, int]  # (steps, drafted, accepted)

# Top-level keys of a streamed chunk that carry counts or the token total: ``remote`` keeps
# the last non-null value of each (SGLang sends ``"sglext": null`` after its sglext chunk).
REPORT_KEYS = ("usage", "flashchat", "timings", "metrics", "sglext")

# vLLM's counters (vllm/v1/spec_decode/metrics.py, SpecDecodingProm); prometheus_client adds
# ``_total`` on the page. "drafts" counts the steps that verified a draft.
VLLM_COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts",
    "drafted": "vllm:spec_decode_num_draft_tokens",
    "accepted": "vllm:spec_decode_num_accepted_tokens",
}
_SAMPLE = re.compile(r"([A-Za-z_:][\w:]*)(\{.*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def server_kind(models: Any, model: str) -> str:
    """``vllm``, ``sglang`` or ``""``, from the ``owned_by`` the server writes into its model
    list (vLLM and SGLang use their own name; nothing else in the reply tells them apart
    before a request). The entry for ``model`` decides where there is one."""
    try:
        cards = [card for card in models["data"] if isinstance(card, dict)]
    except (KeyError, TypeError):
        return ""
    mine = [card for card in cards if card.get("id") == model] or cards
    owners = {str(card.get("owned_by", "")).lower() for card in mine}
    for kind in ("vllm", "sglang"):
        if owners == {kind}:
            return kind
    return ""


def steps_from(generated: int, accepted: int, drafting_steps: int = 0) -> int:
    """Target steps behind a reply: each commits its accepted drafts and one token of its
    own, so ``generated - accepted``; never fewer than the steps that drafted plus the
    prefill step (a reply cut at ``max_tokens`` or a stop string drops accepted drafts)."""
    floor = drafting_steps + 1 if drafting_steps else 0
    return max(generated - accepted, floor, 0)


def _int(value: Any) -> int:
    return round(_float(value))


def _float(value: Any) -> float:
    """A number from a server's JSON; 0 for anything else (the chat never fails on it)."""
    try:
        number = float(value or 0)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _generated(report: dict[str, Any]) -> int:
    return _int(_dict(report.get("usage")).get("completion_tokens"))


def speculation_counts(report: dict[str, Any]) -> Counts | None:
    """(steps, drafted, accepted) from one response, or from the merged report keys of a
    stream; None where the server reports no speculation."""
    ours = report.get("flashchat")
    if isinstance(ours, dict) and "drafted_tokens" in ours:
        return (
            _int(ours.get("steps")),
            _int(ours["drafted_tokens"]),
            _int(ours.get("accepted_tokens")),
        )
    timings = report.get("timings")
    if isinstance(timings, dict) and "draft_n" in timings:
        accepted = _int(timings.get("draft_n_accepted"))
        steps = steps_from(_int(timings.get("predicted_n")), accepted)
        return steps, _int(timings["draft_n"]), accepted
    vllm = _dict(report.get("metrics")).get("speculative_decoding")
    if isinstance(vllm, dict) and "num_draft_tokens" in vllm:
        accepted = _int(vllm.get("num_accepted_draft_tokens"))
        steps = steps_from(_generated(report), accepted, _int(vllm.get("num_spec_steps")))
        return steps, _int(vllm["num_draft_tokens"]), accepted
    details = _dict(report.get("sglext")).get("spec_tokens_details")
    if isinstance(details, list):  # one per choice when n > 1; the app asks for one
        details = details[0] if details else None
    if isinstance(details, dict):
        return sglang_counts(details, _generated(report))
    for choice in report.get("choices") or []:
        meta = choice.get("meta_info") if isinstance(choice, dict) else None
        if isinstance(meta, dict) and "spec_verify_ct" in meta:
            return sglang_counts(meta, _int(meta.get("completion_tokens")) or _generated(report))
    return None


def sglang_counts(details: dict[str, Any], generated: int) -> Counts | None:
    """SGLang's numbers: ``spec_verify_ct`` is the steps (its accept length is
    completion_tokens / spec_verify_ct, so tau is the same number). Accepted and proposed
    drafts are exact under either name they have had; a server that gives neither (absent
    fields come back as 0) has them derived: accepted = tokens - steps (one token of the
    target's own per step), drafted = accepted / ``spec_accept_rate``."""
    steps = _int(details.get("spec_verify_ct"))
    if steps <= 0:
        return None  # nothing was verified: no speculation ran for this reply
    accepted = _int(details.get("spec_num_correct_drafts") or details.get("spec_accepted_drafts"))
    drafted = _int(details.get("spec_num_proposed_drafts") or details.get("spec_proposed_drafts"))
    if drafted:
        return steps, drafted, accepted
    tokens = generated or round(_float(details.get("spec_accept_length")) * steps)
    accepted = max(tokens - steps, 0)
    rate = _float(details.get("spec_accept_rate"))
    return steps, round(accepted / rate) if rate > 0 else 0, accepted


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def vllm_counters(page: str, model: str) -> dict[str, float]:
    """vLLM's speculation counters on a ``/metrics`` page (keys of ``VLLM_COUNTERS``), each
    summed over its label sets (one per engine with data parallelism); only the sets for
    ``model`` where the page names it. Empty where the page has none (speculation off)."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    wanted = set(VLLM_COUNTERS.values())
    for line in page.splitlines():
        match = _SAMPLE.match(line.strip())
        if not match or line.startswith("#"):
            continue
        name = match.group(1).removesuffix("_total")
        if name not in wanted:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        labels = {k: _unescape(v) for k, v in _LABEL.findall(match.group(2) or "")}
        samples.setdefault(name, []).append((labels, value))
    totals = {}
    for key, name in VLLM_COUNTERS.items():
        found = samples.get(name)
        if found:
            mine = [value for labels, value in found if labels.get("model_name") == model]
            totals[key] = sum(mine or [value for _, value in found])
    return totals


def counts_from_counters(
    before: dict[str, float], after: dict[str, float], generated: int
) -> Counts | None:
    """(steps, drafted, accepted) from vLLM's counters around one reply of ``generated``
    tokens: drafted and accepted are the differences; steps derived (``steps_from``). None
    where the counters cannot be this reply's alone (went back: a restart; more steps or
    accepted tokens than the reply has tokens: another request ran meanwhile)."""
    if generated <= 0 or "drafted" not in after or "accepted" not in after:
        return None
    drafted = round(after["drafted"] - before.get("drafted", 0.0))
    accepted = round(after["accepted"] - before.get("accepted", 0.0))
    drafts = round(after.get("drafts", 0.0) - before.get("drafts", 0.0))
    if min(drafted, accepted, drafts) < 0 or accepted > generated or drafts > generated:
        return None
    return steps_from(generated, accepted, drafts), drafted, accepted
