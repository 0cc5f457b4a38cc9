"""Client of the monitoring platform: `MonitoringClient` (async) and `SyncMonitoringClient`.

api.py          one method per endpoint of the document
session.py      send -> classify -> retry, over one pooled httpx.AsyncClient
auth.py         sign-in and signing in again, as an httpx auth flow
classify.py     what an answer means (a body to decode, or the error it stands for), and a failed exchange
options.py      ClientOptions: how a client talks to the server, as one value
retry.py        RetryPolicy, the retry loop after a first failure, the 429 gate, ClientStats
concurrency.py  the limit on requests in flight: fixed, or learned from the answers' latency
answer_size.py  answers read within source.max_answer_mb, decompressed as they come
purpose.py      what each request is for (catalog, new data, history, probes...), as ClientStats counts it
count_cap.py    what series answers tell about a silent cap on points per answer
series.py       measurement answers straight into columns
models.py       typed records of the shapes the document shows
"""

from etl.client.api import MonitoringClient, SyncMonitoringClient
from etl.client.models import Candles, ObjectFull, ObjectShort, Parameter, Points, User
from etl.client.options import ClientOptions
from etl.client.retry import ClientStats, RetryPolicy

__all__ = [
    "Candles",
    "ClientOptions",
    "ClientStats",
    "MonitoringClient",
    "ObjectFull",
    "ObjectShort",
    "Parameter",
    "Points",
    "RetryPolicy",
    "SyncMonitoringClient",
    "User",
]
