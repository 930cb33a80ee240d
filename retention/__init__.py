"""Magnetar retention: retention, message-TTL and backlog-quota policies, the pure decisions they
lead to over a managed ledger's ledgers and cursors, and the service that applies them.

See `decide_retention` for the retention rules, `RetentionService` for the periodic task and the
hooks the broker uses (`RetentionService.explain`, `RetentionService.producer_quota_action`).
"""

from ._decide import CursorBacklog as CursorBacklog
from ._decide import LedgerDecision as LedgerDecision
from ._decide import QuotaAction as QuotaAction
from ._decide import QuotaDecision as QuotaDecision
from ._decide import Reason as Reason
from ._decide import RetentionDecision as RetentionDecision
from ._decide import Verdict as Verdict
from ._decide import decide_retention as decide_retention
from ._decide import evaluate_backlog_quota as evaluate_backlog_quota
from ._decide import expired_ttl_position as expired_ttl_position
from ._decide import ttl_cutoff_ms as ttl_cutoff_ms
from ._decide import ttl_floor_position as ttl_floor_position
from ._policies import BacklogQuota as BacklogQuota
from ._policies import BacklogQuotaPolicy as BacklogQuotaPolicy
from ._policies import BacklogQuotaType as BacklogQuotaType
from ._policies import PolicyOverrides as PolicyOverrides
from ._policies import RetentionConfig as RetentionConfig
from ._policies import RetentionPolicies as RetentionPolicies
from ._policies import TopicPolicies as TopicPolicies
from ._policies import parse_message_ttl as parse_message_ttl
from ._provider import PoliciesProvider as PoliciesProvider
from ._provider import StaticPoliciesProvider as StaticPoliciesProvider
from ._provider import ml_name_of as ml_name_of
from ._provider import namespace_of as namespace_of
from ._provider import topic_of as topic_of
from ._service import LoadedQuotaStates as LoadedQuotaStates
from ._service import QuotaStates as QuotaStates
from ._service import RetentionService as RetentionService
from ._service import TopicReport as TopicReport
from ._service import first_unacked_position as first_unacked_position
from .metrics import RetentionMetrics as RetentionMetrics

__all__ = [
    "BacklogQuota",
    "BacklogQuotaPolicy",
    "BacklogQuotaType",
    "CursorBacklog",
    "LedgerDecision",
    "LoadedQuotaStates",
    "PoliciesProvider",
    "PolicyOverrides",
    "QuotaAction",
    "QuotaDecision",
    "QuotaStates",
    "Reason",
    "RetentionConfig",
    "RetentionDecision",
    "RetentionMetrics",
    "RetentionPolicies",
    "RetentionService",
    "StaticPoliciesProvider",
    "TopicPolicies",
    "TopicReport",
    "Verdict",
    "decide_retention",
    "evaluate_backlog_quota",
    "expired_ttl_position",
    "first_unacked_position",
    "ml_name_of",
    "namespace_of",
    "parse_message_ttl",
    "topic_of",
    "ttl_cutoff_ms",
    "ttl_floor_position",
]
