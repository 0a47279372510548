"""streamtopic: out-of-core anchor-word topic models on Dask and zarr.

The pipeline, one module per stage: :mod:`~streamtopic.corpus` (readers),
:mod:`~streamtopic.vocabulary`, :mod:`~streamtopic.cooccurrence` (ingest),
:mod:`~streamtopic.store` (the zarr store), :mod:`~streamtopic.passes` (passes over Q's
blocks), :mod:`~streamtopic.sketch` (row statistics, candidates, the sketch),
:mod:`~streamtopic.anchors` (FastAnchorWords, exact QR anchors), :mod:`~streamtopic.recovery`
(the fits and the topic-topic matrix), :mod:`~streamtopic.rectification`,
:mod:`~streamtopic.refinement` (EM), :mod:`~streamtopic.hyperparameters` (the Dirichlet
prior α), :mod:`~streamtopic.model` (the estimator),
:mod:`~streamtopic.persistence`, :mod:`~streamtopic.workspace` (scratch and the rectified
cache), :mod:`~streamtopic.inference` (per-document θ, document completion),
:mod:`~streamtopic.evaluation`, :mod:`~streamtopic.metrics`, :mod:`~streamtopic.synth`,
:mod:`~streamtopic.cluster`, :mod:`~streamtopic.cli`.
"""

from . import _warmup

# The first import on a machine (numba's cache lacks the EM kernels): they compile in another
# process from here on, while the package's imports and a fit's first stages run.
_warmup.start(at_import=True)

from ._version import __version__ as __version__
from .cooccurrence import IngestReport, ingest
from .corpus import Corpus, CorpusError, DocChunk, convert, read_corpus
from .evaluation import evaluate
from .fitting import fit
from .model import AnchorTopicModel, ModelError
from .store import CooccurrenceStore, StoreError
from .vocabulary import ENGLISH_STOP_WORDS, Tokenizer, Vocabulary

__all__ = [
    "AnchorTopicModel",
    "CooccurrenceStore",
    "Corpus",
    "CorpusError",
    "DocChunk",
    "ENGLISH_STOP_WORDS",
    "IngestReport",
    "ModelError",
    "StoreError",
    "Tokenizer",
    "Vocabulary",
    "convert",
    "evaluate",
    "fit",
    "ingest",
    "read_corpus",
]
