"""
Topics of the KOS blog corpus
=============================

The UCI KOS corpus (3,430 blog posts from the 2004 US election campaign, 6,906 words, bundled
with streamtopic) from raw counts to topics: ingest it into a co-occurrence store, fit 20
topics with the default method, read the topics, place them on a map, and give topic
proportions to a few documents.
"""

# %%
# Ingest the corpus
# -----------------
# :func:`streamtopic.ingest` streams the corpus once into a co-occurrence store, a versioned
# zarr directory; the store holds the word co-occurrence matrix Q and the counts every later
# stage needs. On the command line: ``streamtopic ingest "$(streamtopic demo-path)" --store
# kos.zarr``.
import tempfile
from pathlib import Path

import dask

import streamtopic as st

dask.config.set(scheduler="threads")  # the library follows Dask's configuration
work = Path(tempfile.mkdtemp(prefix="streamtopic-example-"))
demo = st.corpus.bundled_corpus()
report = st.ingest(demo, work / "kos.zarr", progress=False)
print(report.summary())

# %%
# The store records what it holds:
store = st.CooccurrenceStore.open(work / "kos.zarr")
print(f"V = {len(store.vocab):,} words, {store.n_docs:,} documents, "
      f"{int(store.word_counts.sum()):,} tokens")

# %%
# Fit 20 topics
# -------------
# :class:`~streamtopic.AnchorTopicModel` with no other option runs the default method:
# rectified anchor words on the frequent words, then EM refinement over the corpus.
model = st.AnchorTopicModel(n_topics=20, seed=0).fit(work / "kos.zarr")
print(f"{model.diagnostics_['refinement']['passes']} EM passes, "
      f"log-likelihood per token {model.diagnostics_['refinement']['loglik_per_token'][-1]:.3f}")

# %%
# In a notebook, a fitted model shows its topics as a table: each topic's prevalence p(z),
# its anchor word (a word that, in the model, occurs in that topic only) and its most
# probable words.
model

# %%
# The same as plain lists:
for k, words in enumerate(model.top_words(8)[:5]):
    print(k, model.anchor_words_[k], " ".join(words))

# %%
# A map of the topics
# -------------------
# :func:`streamtopic.report.topic_map` places the topics in a plane by the Jensen–Shannon
# distances of their word distributions (classical MDS); here each point is sized by the
# topic's prevalence and labelled with its anchor word. ``model.report()`` draws the same
# map, and more, as one HTML page.
import matplotlib.pyplot as plt

from streamtopic.report import topic_map

xy = topic_map(model.components_)
fig, ax = plt.subplots(figsize=(7, 5))
ax.scatter(xy[:, 0], xy[:, 1], s=3000 * model.topic_prevalence_, alpha=0.5)
for k, (x, y) in enumerate(xy):
    ax.annotate(model.anchor_words_[k], (x, y), ha="center", va="center", fontsize=8)
ax.set_title("KOS: 20 topics, sized by p(z)")
ax.set_xticks([])
ax.set_yticks([])
fig.tight_layout()

# %%
# Topics of documents
# -------------------
# :meth:`~streamtopic.AnchorTopicModel.transform` gives documents their topic proportions θ
# with the topics fixed; it takes raw texts (tokenised as the training text was), token
# lists, count matrices or a corpus.
import numpy as np

docs = [["bush", "kerry", "poll", "november", "voters", "ohio"],
        ["iraq", "war", "troops", "military", "baghdad"]]
theta = model.transform(docs)
for tokens, row in zip(docs, theta, strict=True):
    top = np.argsort(-row)[:2]
    print(" ".join(tokens), "->",
          ", ".join(f"topic {k} ({model.anchor_words_[k]}) {row[k]:.2f}" for k in top))
