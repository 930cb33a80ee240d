"""The topic side of transactions for messages: each persistent topic's transaction buffer (held,
committed and aborted transactional messages, markers, the max read position, snapshots) and the
`TxnParticipant` the coordinator ends transactions through (`TopicParticipant`)."""

from ._buffer import SNAPSHOT_CURSOR as SNAPSHOT_CURSOR
from ._buffer import TXN_ABORT_MARKER as TXN_ABORT_MARKER
from ._buffer import TXN_COMMIT_MARKER as TXN_COMMIT_MARKER
from ._buffer import BufferHost as BufferHost
from ._buffer import TransactionBuffer as TransactionBuffer
from ._buffer import marker_entry as marker_entry
from ._buffer import txn_info as txn_info
from ._participant import TopicParticipant as TopicParticipant
