"""streamtopic: out-of-core anchor-word topic models on Dask and zarr.

The pipeline, one module per stage: :mod:`~streamtopic.corpus` (readers),
:mod:`~streamtopic.vocabulary`, :mod:`~streamtopic.cooccurrence` (ingest),
:mod:`~streamtopic.store` (the zarr store), :mod:`~streamtopic.anchors` (sketch and
FastAnchorWords), :mod:`~streamtopic.recovery`, :mod:`~streamtopic.model`,
:mod:`~streamtopic.inference` (per-document θ, document completion),
:mod:`~streamtopic.metrics`, :mod:`~streamtopic.synth`, :mod:`~streamtopic.cluster`,
:mod:`~streamtopic.cli`.
"""

from .cooccurrence import IngestReport, ingest
from .model import AnchorTopicModel, ModelError
from .corpus import Corpus, CorpusError, DocChunk, convert, read_corpus
from .store import CooccurrenceStore, StoreError
from .vocabulary import ENGLISH_STOP_WORDS, Tokenizer, Vocabulary

__version__ = "0.1.0"

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
    "ingest",
    "read_corpus",
]
