"""The routing job's plain constants: its bounds, the output codes of routed rows, the reason
codes of rejected rows, and its defaults. No Spark here: the command line reads these for
its help without loading Spark (``pipeline.schema`` holds the Spark column layouts).

A routed row is one of three outputs, told apart by ``output`` (a small int, cheap to carry
through Arrow): a delivery (one per message x matching subscription), an unmatched message,
or a rejected message.
"""

from __future__ import annotations

from typing import Final

from matcher import DIALECTS

# -- bounds ---------------------------------------------------------------------------------

#: Messages per Arrow batch sent to a Python worker
#: (``spark.sql.execution.arrow.maxRecordsPerBatch``, Spark's default): a batch and its
#: results stay a few MB; 25,000 and 50,000 measured no faster on the benchmark.
ARROW_BATCH_ROWS: Final = 10_000
#: Deliveries per Arrow batch sent back. A message can match every subscription, so output
#: is cut by rows rather than by messages: a batch holds at most this many deliveries plus
#: one message's fan-out (and its slice's unmatched and rejected rows).
MAX_OUTPUT_ROWS: Final = 65_536

# -- output codes ---------------------------------------------------------------------------

DELIVERY: Final = 0
UNMATCHED: Final = 1
REJECTED: Final = 2

# -- reason codes of rejected message rows (the matcher adds its own: topic_too_long, ...) --

MALFORMED_ROW: Final = "malformed_row"
MISSING_MESSAGE_ID: Final = "missing_message_id"
MISSING_TOPIC: Final = "missing_topic"
MISSING_TS: Final = "missing_ts"
INVALID_TS: Final = "invalid_ts"
EMPTY_TENANT: Final = "empty_tenant"
UNKNOWN_DIALECT: Final = "unknown_dialect"
INVALID_HEADERS: Final = "invalid_headers"
INVALID_UTF8: Final = "invalid_utf8"  # the matcher's code for the same rule
# ... and of rejected subscription rows (besides the store's and the matcher's codes)
MISSING_FIELD: Final = "missing_field"
DUPLICATE_ID: Final = "duplicate_id"

#: Message dialects; ``headers`` is a subscription kind, not a topic syntax.
MESSAGE_DIALECTS: Final = tuple(DIALECTS)
DEFAULT_DIALECT: Final = "amqp"

#: The engine every executor builds: the compiled trie walk (no warm-up, unlike ``dfa``,
#: whose states are built per new topic; bounded memory; see bench/pipeline.py).
DEFAULT_ENGINE: Final = "native"
