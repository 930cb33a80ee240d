"""The managed ledger's transition table agrees with the rules of its module header, and the
code changes state only through it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import managed_ledger._ledger as ledger_module
from managed_ledger import ManagedLedgerState
from managed_ledger._ledger import TRANSITIONS, allowed_transition

S = ManagedLedgerState


def test_every_rule_of_the_header_has_its_transitions_and_no_more() -> None:
    doc = ledger_module.__doc__ or ""
    rules = set(re.findall(r"\* Rule (\d+):", doc))
    assert rules == {rule for rule, _olds, _new in TRANSITIONS}
    for rule, _olds, new in TRANSITIONS:  # each rule's text names the state it leads to
        text = doc.split(f"* Rule {rule}:")[1].split("* Rule")[0]
        assert new.name in text, (rule, new)


def test_the_table_says_what_the_rules_say() -> None:
    assert allowed_transition(S.LEDGER_OPENED, S.ROLLING)
    assert allowed_transition(S.ROLLING, S.FENCED) and allowed_transition(S.TERMINATED, S.FENCED)
    assert not allowed_transition(S.FENCED, S.LEDGER_OPENED)  # FENCED is final but for close
    assert not any(allowed_transition(S.CLOSED, new) for new in S)  # CLOSED is final
    assert not allowed_transition(S.ROLLING, S.TERMINATED)  # terminate waits for the roll
    assert all(allowed_transition(old, S.CLOSED) for old in S if old is not S.CLOSED)


def test_state_changes_only_through_set_state() -> None:
    tree = ast.parse(Path(ledger_module.__file__).read_text())
    direct = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(ast.unparse(t) == "self.state" for t in node.targets)
    ]
    assert len(direct) == 2  # the initial state, and _set_state itself
