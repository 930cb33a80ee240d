"""The topic side of transactions for acknowledgements: each subscription's acks held by open
transactions until they commit (made real) or abort (released for redelivery), persisted with the
subscription's cursor."""

from ._pending import MAX_PENDING_BYTES as MAX_PENDING_BYTES
from ._pending import PROPERTY_PREFIX as PROPERTY_PREFIX
from ._pending import PendingAckHost as PendingAckHost
from ._pending import PendingAcks as PendingAcks
