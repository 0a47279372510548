"""Refinement: EM over the corpus, started from the spectral topics, at a bounded cost.

The anchor-word topics are a method-of-moments estimate: fast and provably consistent, but
they do not maximise the likelihood of the documents. EM for LDA started from them does (the
"spectral initialisation, likelihood refinement" recipe). Each pass is

* E-step, per document, topics fixed: zero-order collapsed variational Bayes (CVB0, Asuncion
  et al., "On smoothing and inference for topic models", 2009). Each token's topic
  responsibilities are r_dw ∝ (N_d − r_dw + α) ⊙ β_w, where N_d = Σ_w h_dw r_dw are the
  document's expected topic counts, iterated to a fixed point (below: how). Leaving the token
  out matters: EM with a point estimate of θ_d (responsibilities
  ∝ θ_d ⊙ β_w) lets a document's tokens pull its θ_d towards themselves. That estimator is
  biased, since θ_d has K − 1 free parameters per document whatever the corpus size. Measured
  from the true topics on a semi-synthetic corpus (V = 2,000, K = 20, 10M tokens), it drifts
  to a matched L1 of 0.083, against 0.030 for CVB0 with α = 0.01. On held-out real text CVB0
  is as good or better (document completion after 100 passes from the plain spectral topics,
  K = 20): KOS −7.385 against −7.387 nats/token, 20 Newsgroups −7.700 against −7.707
  (variational Bayes, as in gensim: −7.413 and −7.789).
* M-step: β_k ∝ N_k + η, with N_kw = Σ_d h_dw r_dwk the expected topic-word counts.

The prior of θ_d (issue 28). ``alpha`` may be one pseudo-count per topic, and ``learn_alpha``
re-estimates it after each pass (one step of Minka's fixed point on the documents' N_d). A
model's refinement takes its α from :func:`prior_alpha`: :data:`PRIOR` 'fixed' (the default,
the symmetric ``ALPHA``) or 'spectral' (the asymmetric α the spectral stages estimate from R
and the prevalence). Measured from the default spectral topics, K = 20, one run each
(``python benchmarks/prior.py``; held-out nats/token by document completion, NPMI of the
top 10 words on the training documents; fixed → spectral → spectral then learned):

* 20 Newsgroups: −8.0475 → −8.0511 → −8.0523; NPMI 0.228 → 0.229 → 0.240. Learned from
  the fixed α instead: −8.0537, 0.241 (both reach α₀ ≈ 6.9).
* KOS: −7.4228 → −7.4239 → −7.4255; NPMI 0.189 → 0.190 → 0.188.
* SOTU paragraphs: −7.6075 → (spectral then learned) −7.6734; NPMI 0.165 → 0.167 (α₀ 11.4).
* Semi-synthetic (V = 2,000, K = 20, 20,000 documents of 100 tokens): matched L1 after
  refinement, symmetric true α = 0.1: 0.069 fixed, 0.076 spectral then learned; an
  asymmetric true α (α₀ = 2): 0.112 and 0.125. A learned α moves the training likelihood
  the stopping rule watches, and EM stopped after 2 passes instead of 4-5.

So neither is the default: the spectral α changes nothing measurable, the learned one buys
NPMI on 20 Newsgroups only, at a cost in held-out likelihood (SOTU: −0.066) and in recovery
of known topics. η: 0.1 against 0.01, 0.03 and 0.3 on 20 Newsgroups (learned α): −8.052,
−8.071, −8.061, −8.065 nats/token, NPMI 0.241, 0.239, 0.238, 0.236; 0.1 stays. The lever
that moved both figures is more passes: with ``tol`` 1e-6 and 60 passes (fixed α) 20
Newsgroups reaches −8.0204 (NPMI 0.246; 150 passes: −8.0189, 0.251) and KOS −7.4158 (NPMI
0.193), at three to four times the refinement's passes (tomotopy, 1,000 Gibbs iterations,
same tokens: −8.0714, NPMI 0.278; KOS −7.4645, 0.207).

Named topics (issue 27, :mod:`streamtopic.seeding`). A named word is pinned: held at 0 in
every topic but its own (``pinned``), so all its tokens stay with its topic. That alone did
not make the topic about its words. On 20 Newsgroups (K = 20, "space nasa orbit", "hockey
nhl", "gun firearms"; ``benchmarks/seeded.py``) the gun topic ended as "people gun like
think just guns government time make know": 2 of talk.politics.guns' 20 key words in its
top 10, and its tokens were 7.8% of the corpus where the group's documents are 3.0%. It had
become the topic of argument in general: 53% of its tokens from talk.politics.guns, 16% from
talk.politics.misc, 8% from the Middle East group, and those documents' common words went to
it rather than to the topic of everyday words. That is where EM leads, not (only) where the
spectral stages start: started from each group's word frequencies as the named topics (the
group's own top 10 holds 4 key words), EM ended at 2 again; from all 20 groups' frequencies,
at 5. Nor do the named words' co-occurrences favour those words: p(w | gun, firearms) /
p(w) is 1.02 for "like", 0.69 for "just", 0.71 for "know" (37 for "gun", 12.8 for "control").

So a named topic is, in the E-step, a mixture: (1 − ``named_share``) times its estimate plus
``named_share`` times the same restricted to its named words (:func:`named_mixture`), as
the seeded topics of Jagarlamudi, Daumé and Udupa ("Incorporating Lexical Priors into Topic
Models", 2012) mix a distribution over the seed words with a regular topic, here with the
mixing weight fixed. The named words' tokens are pinned
anyway, so what it changes is that every other word is (1 − ``named_share``) times as
likely under a named topic as its estimate says: a token joins the named topic only where
the topic explains it clearly better than the others, and the common words of its documents
go to the topics that hold them everywhere. The topics given back (and ``prevalence``) are
the estimates from the expected counts, without the mixture. Measured (20 Newsgroups, the
default fit with seeds 0, 1 and 2; key words of space, hockey and guns among the named
topics' top 10; held-out nats/token by document completion):

* ``named_share`` 0: 8/8/9, 8/8/8, 2/1/2; −8.0301, −8.0403, −8.0404.
* 0.1: 10/10/10, 8/8/8, 8/6/8; −8.0293, −8.0373, −8.0359.
* 0.15: 10/10/10, 8/8/8, 8/8/8; −8.0289, −8.0396, −8.0368 (the gun topic "gun guns weapons
  firearms fbi crime control batf people koresh", 3.6% of the tokens).
* 0.2: 10/10/10, 8/8/8, 9/8/8; −8.0288, −8.0425, −8.0422.
* 0.3: 10/10/10, 8/8/8, 9/9/8; −8.0358, −8.0500, −8.0498.

Its price shows where the named words are true anchors of well separated topics
(semi-synthetic, V = 2,000, K = 20, 20,000 documents of 70 tokens, 5 planted anchors named,
core of 1,500 words, refined): the named topics' mean L1 distance to the truth is 0.083 at
0, 0.089 at 0.1, 0.095 at 0.15 and 0.103 at 0.2 (unseeded, the same topics: 0.084), the
others' 0.081, 0.082, 0.084, 0.086. Instead of the mixture, pseudo-counts on the named words
(Watanabe and Zhou's seededlda: λ times each word's own count, added to every M-step) also
focus the topic, but their weight follows the named words' frequency, not the topic's size:
at λ = 5 the gun topic reached 8, 5 and 6 key words on the three seeds; at λ = 20 it reached
6 to 9 while the space topic, whose "space" is frequent, shrank to its named words (3 key
words, 0.2% of the tokens). 0.15 is the default (:data:`NAMED_SHARE`).

Where the rest of the NPMI gap lay (issue 28), on stores weighted per document, before
per-token weights (:mod:`streamtopic.cooccurrence`: the spectral start they give closes most
of it, e.g. 20 Newsgroups 0.245 → 0.266 over seeds 0-4) and SQUAREM (below). From the
default spectral topics, those of
the anchor rule :data:`~streamtopic.anchors.ANCHOR_MAX_SHARE`, one run each, held-out
nats/token and NPMI, K = 20 unless said; the default first: 20 Newsgroups −8.0500, 0.245;
K = 50 −7.9324, 0.265; SOTU −7.6046, 0.170; KOS −7.4228, 0.189; K = 50 −7.3466, 0.191):

* α 0.1 (tomotopy's): 20 Newsgroups −8.0510, 0.238; K = 50 −7.9382, 0.266; SOTU −7.6208,
  0.168; KOS −7.4229, 0.192; K = 50 −7.3489, 0.197. α 0.3: 0.227, 0.271 (−7.9525), 0.165
  (−7.6481), 0.189, 0.194.
* η 0.03: 20 Newsgroups 0.244, K = 50 0.268, SOTU 0.169.
* ``tol`` 1e-4: 20 Newsgroups −8.0254, 0.255 (47 passes against 20); K = 50 −7.9195, 0.255
  (42 against 23); SOTU −7.5843, 0.172 (31 against 17); KOS −7.4189, 0.194 (24 against 15);
  K = 50 −7.3379, 0.191 (29 against 18). With α 0.1: 0.259, 0.267, 0.170.
* The start. EM from random topics (the unigram times Gamma(1) noise) to ``tol`` 1e-5 (60-130
  passes): KOS 0.205-0.224 over three seeds (tomotopy 0.207), K = 50 0.195-0.203 (0.214),
  20 Newsgroups 0.228-0.265 over four seeds (0.278), SOTU 0.171, at held-out likelihoods
  as good as from the spectral start or better; from the spectral start to the same
  tolerance, KOS 0.193 and 20 Newsgroups 0.245 (before the rule). With named anchors
  taken from tomotopy's topics (hockey, baseball, armenian, israel, motif, clipper…) the
  default refinement gives 20 Newsgroups −8.0253, 0.266. The gap is the spectral start's
  basin: on 20 Newsgroups about a third of the anchors are generic words (question,
  wanted, read, new, problem, claim, open), since the 299 candidates of document frequency
  ≥ 400 are mostly generic, and a lower threshold admits noisier rows (NPMI 0.203-0.217 at
  200, 100 and 50; likewise a core of 1,000 or 4,000 words, rectification off, anchors by
  FastAnchorWords, the columns of Q̄ scaled by p^−½ or p^−1, all before the rule, or a
  rectification of rank 1.5K or 2K with it: 0.212-0.246).
* Collapsed Gibbs sweeps after the refinement (``python benchmarks/gibbs.py``; a plain
  sampler compiled with numba over the training documents, each token's topic first drawn
  ∝ (N_dk + α_k) β_kw from the refined state, the topics read off the counts; the mean of
  seeds 0 and 1, one core). A sweep of 20 Newsgroups' 1.25M tokens costs 0.05 s at K = 20
  (0.10 s at K = 50; KOS: 0.018 s and 0.033 s), so issue 28's 2 s buys about 35.
  20 Newsgroups, K = 20 (default −8.0482, 0.243), S = 10, 30, 100, 300 sweeps: with the
  refinement's α and η, NPMI 0.242, 0.247, 0.251, 0.256 (held-out −8.058, −8.053,
  −8.045, −8.033); α learned as tomotopy learns it (Minka's fixed point every 10 sweeps;
  α₀ 0.2 → 1.1) 0.242, 0.252, 0.264, 0.278 (−8.058, −8.054, −8.042, −8.030); tomotopy's
  priors (α 0.1, η 0.01, α learned) 0.240, 0.247, 0.262, 0.270 (−8.101 to −8.082). EM after
  the sweeps (the defaults, from the counts smoothed by ``ETA``) keeps most of it and
  gains held-out likelihood: 0.250, 0.253, 0.259, 0.275 at −8.039, −8.028, −8.022,
  −8.010 (α learned). KOS, K = 20 (default −7.4201, 0.189; tomotopy 0.207): 0.188, 0.190,
  0.192, 0.194 with α learned, 0.186-0.198 with tomotopy's priors, 0.191-0.198 after EM
  (held-out −7.401 to −7.417). K = 50, α learned: 20 Newsgroups 0.255, 0.258, 0.269, 0.271
  (default 0.264; tomotopy 0.290), 0.283 at 300 with tomotopy's priors; KOS 0.186-0.192
  (default 0.191; tomotopy 0.214), 0.201 at 300. The same sampler from a random start,
  tomotopy's priors, 1,000 sweeps: 20 Newsgroups 0.284 (−8.078; tomotopy 0.278, −8.0714),
  K = 50 0.279; KOS 0.199 (−7.481; tomotopy 0.207, −7.4645), K = 50 0.211: it matches
  tomotopy. From the refined state it is ahead by only 0.003-0.012 NPMI at 100 and 300
  sweeps (by 0.05-0.09 nats/token at 100). So not adopted: within the budget (S ≤ 30) the
  sweeps gain at most 0.009 NPMI on 20 Newsgroups (0.014 with EM after them, still 0.011
  short of tomotopy − 0.01) and 0.001 on KOS (0.005 after EM); the gap closes on 20
  Newsgroups only at 300 sweeps with α learned (17 s, against 3.6 s for the whole fit
  from the store), on KOS not within 300. What EM from the sweeps' topics adds is held-out
  likelihood (20 Newsgroups −8.039 after 10 sweeps and 5 more passes, against −8.048),
  where the defaults already meet the issue's bar.
* α and η again, on stores weighted per token (the default fit, seeds 0-4, 375 fits: α in
  {0.001, 0.003, 0.01, 0.03, 0.1} × η in {0.03, 0.05, 0.1, 0.2, 0.3, 0.5}, the candidates on
  all five settings; mean NPMI change against the default, 20 Newsgroups K = 20 / K = 50 /
  KOS K = 20 / K = 50 / SOTU): η 0.3 +0.006 / −0.001 / −0.002 / −0.005 / +0.003; η 0.5
  +0.008 / −0.008 / −0.002 / −0.034 / +0.007, its held-out below tomotopy − 0.01 on 20
  Newsgroups K = 50; η 0.05 −0.003 / +0.002 / +0.001 / +0.005 / −0.002; α 0.003 or 0.03 at
  η 0.1 within ±0.003 everywhere. So η is the lever and the corpora pull it apart (20
  Newsgroups K = 20 and SOTU up, KOS down), while their tokens per topic and word, N/(K·V),
  are alike (3.0-3.7 at K = 20): no scaling of η by the corpus separates them, and no pair
  raised NPMI everywhere. The defaults stay.

EM stops when the log-likelihood per token of the training documents (θ_d = (N_d + α) /
(Σ_k N_dk + Kα), the topics the pass started from) changes by less than ``tol`` (relative)
from one pass to the next, or after ``max_passes`` (or after exactly ``passes``, as in the
papers' experiments, in plain EM passes).

Run to convergence, EM is accelerated by SQUAREM (:data:`ACCELERATE`, :func:`_squarem`;
Varadhan and Roland 2008): cycles of two EM steps x₀ → x₁ → x₂ of the topics, an
extrapolation along them, x′ = x₀ − 2a·r + a²·v (r = x₁ − x₀, v = x₂ − 2x₁ + x₀,
a = −‖r‖/‖v‖ ≤ −1), and an EM step from x′, which starts the next cycle; an x′ less likely
than the best topics before it is dropped for x₂. Only the plain step x₁ → x₂ tests the
stopping rule: an extrapolation's gain says nothing about convergence (tested on every
pass, overrelaxed EM, β ∝ β^(1−ω) β_EM^ω with ω growing by 1.2 per improving pass, up to
2.5, stopped after 18 passes on 20 Newsgroups at every ``tol`` from 3e-4 to 1e-4, held-out
−8.0417). Measured from the
default spectral topics at the default ``tol`` by a helper's harness on one core (the
refinement's own passes; passes, EM seconds, held-out nats/token, NPMI; plain EM → SQUAREM):

* 20 Newsgroups, K = 20: 20 → 14, 2.49 → 2.06 s, −8.0500 → −8.0466, 0.245 → 0.243;
  K = 50: 23 → 17, 4.25 → 3.72 s, −7.9324 → −7.9267, 0.265 → 0.260.
* KOS, K = 20: 15 → 11, 0.69 → 0.61 s, −7.4228 → −7.4203, 0.189 → 0.192; K = 50: 18 → 14,
  1.40 → 1.23 s, −7.3466 → −7.3424, 0.191 → 0.192.
* SOTU paragraphs, K = 20: 17 → 14, 1.84 → 1.82 s, −7.6046 → −7.5867, 0.170 → 0.171.

An extrapolated pass costs 10-20% more E-step maps than a plain one (the documents' warm
starts help less after a jump), so a pass saved is worth less than a pass. To EM's
likelihood at ``tol`` 1e-4 (47 passes on 20 Newsgroups, −8.0254, NPMI 0.255) SQUAREM
comes in 28-32 passes; none of the variants tried (overrelaxation with ω capped at 2,
SQUAREM in log β, longer steps, the other step lengths S1 and S2) reached that quality in
the default's time on 20 Newsgroups K = 20; on the other four they did at about the
default's (see issue 28's notes). NPMI moves within ±0.005 either way: one spectral start
and one path per setting, differences of that size are the paths'.

Cost. The passes run on a *sample*: whole partitions of the corpus, drawn at random under the
seed until ``sample_tokens`` in-vocabulary tokens are read. The sample is read and tokenised
once, into CSR, and persisted with Dask (in this process on the
threaded scheduler, on the workers of a cluster; the tasks of every pass then run where their
documents are). So the cost of the passes depends on ``sample_tokens``, not on the corpus. When
the sample is a proper subset, ONE full pass follows: the E-step for every document with the
converged topics (the sample from the cache, the rest of the corpus read once) and the M-step
over the whole corpus, which gives every word its row, words absent from the sample included.
Every partition is read exactly once. When the corpus fits within ``sample_tokens`` the sample
is the corpus and there is no extra pass.

The documents' topic counts N_d (and their last change, below) stay on the workers as
persisted Dask data from one pass to the next; the topics reach them through a ``.npy``
file in the scratch directory (memory-mapped, read once per process), never through the
scheduler. Each partition's documents are CSR over its own distinct words, so its E-step
reads the topics and adds the expected counts for those U words only (U×K, gathered from
and added into V×K); the partitions' counts are summed by a tree reduction in a fixed
order, so the result is the same bit for bit on every run of the threaded scheduler.
The inner loops are compiled (:mod:`streamtopic._kernels`) and run on the documents'
non-zeros only.

The E-step's fixed point, and its cost. One *map* of a document computes every token's
responsibilities from N_d (one multiply-add per topic per distinct word, and a
normalisation) and sums them into the new N_d. Profile of the plain iteration this replaced
(one map at a time until no count moves more than ``THETA_TOL``·n_d, each pass from the
previous pass' N_d), on the 60M-word long-document corpus (9,271 documents of about 5,000
words, 9.9M distinct (document, word) pairs, V = 64,539, K = 50; ``python
benchmarks/refinement_cost.py``): 16 passes, the first from uniform N_d at 29 maps per
document (weighted by its pairs; median 27), the later ones at 13 falling to 3.5; a map cost
85-91 ns per pair
(float64), so the first pass was a quarter of the maps and the 15 warm ones the rest; and the
partitions' V×K counts (199 partitions of 47 documents, each touching 19,000 of the 64,539
words) cost another 1.5 s of CPU per pass (4 ms to zero each, 0.7 s to add them). Now:

* SQUAREM (Varadhan and Roland 2008) accelerates each document's iteration: two maps, an
  extrapolation of N_d (clamped at 0, rescaled to n_d), whose map starts the next round.
  The map's leave-out reads the previous map's responsibilities, so it is not a function of
  N_d alone: a round whose residual does not improve on the best is counted, and after
  :data:`~streamtopic._kernels.STALLED_ROUNDS` of them plain maps go on (see there).
* A warm pass starts each document from its last N_d moved by its change in the pass
  before (``step``, float32, clamped at 0, rescaled): EM's late passes move N_d smoothly.
  (Moved by 0.5 or 1.5 times the change: more maps.)
* Responsibilities and topics in float32 (counts and sums in float64) halve a map's cost:
  44 against 91 ns per pair on the 60M words (K = 50, one core). With each partition over
  its own words (above) its topics and counts stay in the caches: the E-steps of a
  refinement on the 60M words take 30 s of one core, against 55 s over all V words. The
  plain iteration in float32 makes the same maps as in float64, to the held-out likelihood's
  fifth decimal on every corpus below.

E-step maps summed over a refinement from the default spectral topics (the plain iteration;
SQUAREM; SQUAREM and the extrapolated start), and the E-steps' seconds on one core: KOS
(K = 20) 374k, 228k, 180k; 20 Newsgroups 2.12M, 1.32M, 1.12M (K = 20; 4.5, 2.8, 2.2 s) and
2.16M, 1.53M, 1.30M (K = 50); 9.2M words of long documents (K = 50) 153k, 70k, 61k (7.3, 4.0,
3.5 s); the 60M words 1.04M, 516k, 428k (44, 31, 28 s). The refinement follows the same path
to its tolerances: the same passes to one, the training likelihood per pass to 5e-4
relative, and the held-out likelihood by document completion within −0.0005 to +0.0013
nats/token of the plain iteration's (see the README; on the long documents it moves by
0.003 between the 12th pass and the 35th).

Not adopted, measured on the same refinements: a first map that leaves out each token's
share estimated from N_d, so that every accepted map leaves its tokens out (on the
semi-synthetic test corpus the refined topics end further from the truth: matched L1 0.066
against 0.058 after 30 passes, since a document converged after that map keeps the one-step
estimate of the leave-out, which over-corrects); a looser tolerance for the first pass
(1e-2: 6% less time on the 60M words, one more pass); a bound of 1-3 maps per document per
warm pass (3-5 times fewer maps, but EM then stops 0.03-0.05 nats/token short of the
training likelihood on 20 Newsgroups: held-out −8.066 to −8.080 against −8.048 at K = 20);
SQUAREM or over-relaxation of the topics across passes (the stopping rule then stops early
on KOS and 20 Newsgroups, or saves one pass in 15 on the long documents at a lower held-out
likelihood).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import lru_cache, partial
from numbers import Integral, Real
from typing import Any, cast

import numpy as np

from ._io import written_aside
from ._kernels import add_rows, cvb0_estep
from ._params import Constraint, Interval, validated
from ._scratch import collect, owned_dir
from .cluster import compute, delayed_tree, n_workers, persist
from .corpus import Corpus, read_corpus
from .hyperparameters import estimate_alpha
from .progress import Passes, Stage
from .termmap import term_index, to_global

__all__ = ["NAMED_SHARE", "PRIOR", "RefineResult", "named_entries", "named_mixture", "prior_alpha",
           "refine_topics"]

# Pseudo-count per topic of the documents' topic counts. Held-out likelihood on KOS and 20
# Newsgroups changes by under 0.001 nats/token between 0.01 and 0.1; recovery of known topics
# is better at 0.01 (matched L1 from the truth after 30 passes: 0.030, against 0.044 at 0.1).
ALPHA = 0.01
#: Bounds of a learned α_k (:func:`_minka_step`): a topic absent from the sample's documents
#: drives its α_k to 0, where ψ diverges.
ALPHA_MIN, ALPHA_MAX = 1e-4, 1e2
ETA = 0.1  # β pseudo-count per word (smooths rare words; 0.1 beat 0.01 on 20 Newsgroups)
#: The prior of θ_d in a model's refinement (:func:`prior_alpha`): 'fixed', the symmetric
#: ``ALPHA``; 'spectral', the asymmetric α the spectral stages estimate from their moments
#: (:func:`~streamtopic.hyperparameters.estimate_alpha` of the topic-topic matrix R and the
#: prevalence).
PRIOR = "fixed"
#: Whether the refinement re-estimates α after each pass (one step of Minka's fixed point on
#: the documents' topic counts N_d), from the prior it is given.
LEARN_ALPHA = False
# Relative change of the log-likelihood per token at which EM stops. Measured from the
# spectral topics (plain and rectified) on KOS and 20 Newsgroups (K = 20): 1e-4 stops after
# 25-45 passes, within 0.006-0.011 nats/token of the held-out likelihood after 100 passes
# (96-99% of the gain); 1e-3 stops after 8-9 passes, 0.02-0.08 nats/token short. From the
# default (rectified, core) spectral topics on 20 Newsgroups, 3e-4 stops after 19 passes at
# K = 20 and 23 at K = 50, against 25 and 50 for 1e-4, at −8.041 and −7.949 nats/token
# held out, against −8.038 and −7.921 (LdaMulticore, 5 passes: −8.19 and −8.17; tomotopy,
# 1,000 Gibbs iterations: −8.07 and −7.96): 3e-4 keeps the best held-out likelihood of the
# three in 60-75% of the refinement's time.
TOL = 3e-4
MAX_PASSES = 50
#: The named words' share of a named topic in the E-step (:func:`named_mixture`; measured in
#: the module's docstring: on 20 Newsgroups 0.15 is the smallest share that gave the gun topic
#: 8 key words on each of three seeds, at a held-out likelihood no worse than without it).
NAMED_SHARE = 0.15
# In-vocabulary tokens of the cached sample. On a 102M-token semi-synthetic corpus (V = 20,000,
# K = 50, 300-token documents; benchmarks/refinement.py) the refined topics beat the spectral
# ones (matched L1 to the truth 0.109) from 50M tokens: 0.098, against 0.128 at 10M, 0.110 at
# 20M and 0.093 for the whole corpus; refinement then took 45 s, 0.55× the ingest time (81 s),
# with a peak RSS of 1.1 GB (the whole corpus: 61 s, 0.75×, 1.9 GB).
SAMPLE_TOKENS = 50_000_000
#: Whether EM's passes on the sample are accelerated by SQUAREM (:func:`_squarem`) when it
#: runs to convergence. Measured from the default spectral topics, at the default ``tol``
#: (passes; EM seconds on one core; held-out nats/token; NPMI; plain EM first): 20
#: Newsgroups K = 20: 20 → 14 passes, 2.49 → 2.06 s, −8.0500 → −8.0466, 0.245 → 0.243;
#: K = 50: 23 → 17, 4.25 → 3.72 s, −7.9324 → −7.9267, 0.265 → 0.260; KOS K = 20: 15 → 11,
#: 0.69 → 0.61 s, −7.4228 → −7.4203, 0.189 → 0.192; K = 50: 18 → 14, 1.40 → 1.23 s,
#: −7.3466 → −7.3424, 0.191 → 0.192; SOTU K = 20: 17 → 14, 1.84 → 1.82 s, −7.6046 →
#: −7.5867, 0.170 → 0.171 (see the module's docstring). On stores weighted per token
#: (:mod:`streamtopic.cooccurrence`), whose spectral topics start EM closer, the mean over
#: seeds 0-4, K = 20 (passes; EM seconds on two cores; held-out; NPMI): 20 Newsgroups
#: 13.6 → 11.0, 0.95 → 0.94 s, −8.0468 → −8.0431, 0.266 → 0.266; KOS 13.2 → 9.8, 0.52 →
#: 0.45 s, −7.4042 → −7.4036, 0.208 → 0.207; SOTU 12.4 → 9.8, 0.88 → 0.82 s, −7.5944 →
#: −7.5870, 0.189 → 0.188; 20 Newsgroups K = 50 (seed 0): 18 → 14, 2.02 → 1.70 s. So
#: the same NPMI, a better held-out likelihood, and time saved where the passes are dear.
ACCELERATE = True
#: Entries of SQUAREM's extrapolated topics are raised to at least this before the rows are
#: renormalised (the extrapolation may leave the simplex).
EXTRAPOLATION_FLOOR = 1e-12
#: SQUAREM's step a is at most −this: at a = −1 the extrapolation is x₂ itself (plain EM).
SQUAREM_MIN_STEP = 1.0
START_FLOOR = 1e-10  # added to every entry of the starting topics: no token has probability 0
#: A document's E-step on the sample stops when a map moves no count of N_d more than
#: this·(n_d + α₀). 2e-3 was measured (per-token stores, seeds 0-4): 15-30% less EM time on
#: 20 Newsgroups, KOS and SOTU (20 Newsgroups K = 50 3.07 → 2.63 s on one core) at NPMI
#: within the seeds' spread, but the semi-synthetic acceptance corpus (V = 2,000, K = 20,
#: 100,000 documents of 70 tokens) came out farther from the true topics: matched L1 0.0397
#: at 1e-3, 0.0409 at 1.5e-3, 0.0426 at 2e-3 (at 20,000 documents 0.0792 and 0.0795), so
#: 1e-3 stays.
THETA_TOL = 1e-3
#: THETA_TOL of the full pass' documents outside the sample, whose topic counts start from
#: scratch and serve the M-step only. On the billion-token corpus (benchmarks/billion.py,
#: K = 100) the fit with the defaults took 267 s at 1e-3 (matched L1 to the true topics
#: 0.259), 215 s at 3e-3 (0.262) and 191 s at 1e-2 (0.269) (measured with the plain
#: iteration of the E-step, before SQUAREM).
FULL_PASS_THETA_TOL = 3e-3
THETA_MAX_ITER = 100  # most maps per document per pass (SQUAREM's included)
#: A cached sample of fewer partitions than this is cut into this many pieces of whole
#: documents and about equal tokens, one E-step task a piece: a corpus read as one partition
#: (UCI KOS, 409,292 tokens) otherwise runs its E-steps on one core. A count, not set by the
#: number of workers, so that the pieces, and with them the bits of the sums, are the same
#: on every machine; larger samples are left in their partitions, since each piece costs its
#: own U×K rows in the pass' sum (cutting the 11 partitions of 20 Newsgroups' sample into 17
#: pieces slowed EM at K = 50 from 1.93 to 2.07 s, into 27 to 2.20 s). Measured on KOS's
#: store (the default fit's EM seconds, medians of 5 in turns, 2 cores; 1 → 2 / 4 / 7
#: pieces): K = 20 0.51 → 0.47 / 0.47 / 0.47, K = 50 0.93 → 0.73 / 0.75 / 0.77 (the steps
#: between the E-steps are serial); the same likelihood to 1e-14.
SAMPLE_PIECES = 4
#: Partitions whose U×K expected counts one task adds into a V×K array (then summed by a
#: tree). On the 60M-word corpus (199 partitions, V = 64,539, K = 50) groups of 8 (the
#: reduction trees' fan-in) cost 0.41 s of CPU per pass, groups of 32 0.28 s.
ADD_GROUP = 32
#: Name prefix of the refinement's scratch directory (owned: see ``streamtopic._scratch``).
REFINE_PREFIX = ".streamtopic-refine-"


@dataclass
class RefineResult:
    """Topics after EM refinement.

    Attributes
    ----------
    components : ndarray of shape (K, V)
        Refined topic-word distributions (rows sum to 1): the last M-step's estimates (a
        named topic's without the mixture its E-steps read, ``named_share``).
    prevalence : ndarray of shape (K,)
        Share of the tokens assigned to each topic by the last M-step.
    topic_tokens : ndarray of shape (K,)
        Expected tokens of each topic in the last M-step: with it, the expected counts are
        N = components * (topic_tokens + V η)[:, None] − η.
    loglik_per_token : list of float
        Log-likelihood per token of the sample, one per EM pass (measured with the topics that
        pass started from); the stopping rule watches it.
    seconds : list of float
        Wall time per EM pass on the sample.
    theta_iterations : list of int
        E-step maps per pass, summed over the documents (each pass starts from the previous
        pass' topic counts N_d, moved by their change in the pass before).
    converged : bool
        The log-likelihood's relative change in the last pass was below ``tol``.
    passes : int
        EM passes run on the sample.
    sample_docs, sample_tokens : int
        Documents and in-vocabulary tokens of the sample.
    sample_partitions, partitions : int
        Partitions in the sample, and in the corpus.
    sample_partition_indices : ndarray of int, shape (sample_partitions,)
        Which partitions (positions in ``corpus.parts``) the sample is, in the order read.
    sample_pieces : int
        E-step tasks of a pass on the sample: its partitions, or ``SAMPLE_PIECES`` pieces
        of them when there are fewer (:func:`_split_sample`).
    full_pass : bool
        Whether a full pass over the corpus followed (the sample was a proper subset).
    corpus_docs, corpus_tokens : int
        Documents and tokens of the whole corpus (known after a full pass; else the sample's).
    full_pass_loglik_per_token : float or None
        Log-likelihood per token of the whole corpus in the full pass.
    read_seconds, full_pass_seconds : float
        Wall time to read and cache the sample, and of the full pass.
    alpha : ndarray of shape (K,)
        The prior of θ_d the last E-step used (learned when ``learn_alpha``).
    extrapolations : list of float
        SQUAREM's step a of each cycle (``accelerate``; :func:`_squarem`), in order.
    rejected : int
        Extrapolated topics less likely than the best before them (the cycle went on from
        the plain EM step instead).
    """

    components: np.ndarray
    prevalence: np.ndarray
    topic_tokens: np.ndarray | None = None
    loglik_per_token: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    theta_iterations: list[int] = field(default_factory=list)
    converged: bool = False
    passes: int = 0
    sample_docs: int = 0
    sample_tokens: int = 0
    sample_partitions: int = 0
    partitions: int = 0
    sample_partition_indices: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    sample_pieces: int = 0
    full_pass: bool = False
    corpus_docs: int = 0
    corpus_tokens: int = 0
    full_pass_loglik_per_token: float | None = None
    read_seconds: float = 0.0
    full_pass_seconds: float = 0.0
    alpha: np.ndarray = field(default_factory=lambda: np.zeros(0))
    extrapolations: list[float] = field(default_factory=list)
    rejected: int = 0


# ----------------------------------------------------------------------------- worker side


@dataclass
class _Docs:
    """One partition's documents as CSR over its own distinct words (documents with at least
    one in-vocabulary token only): ``words`` (U,) int64 the words' global ids, sorted;
    ``indptr`` (n+1,) int64, ``indices`` (nnz,) int32 positions in ``words`` sorted within
    rows, ``data`` (nnz,) float64 counts. The E-step's topics and expected counts are then
    U×K, not V×K: a partition of 47 long documents (the 60M-word corpus: V = 64,539) has
    U ≈ 19,000."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    words: np.ndarray

    @property
    def n_docs(self) -> int:
        return int(self.indptr.size - 1)

    @property
    def tokens(self) -> float:
        return float(self.data.sum())


def _docs_of(chunks: list[Any], vocab: list[str]) -> _Docs:
    """A partition's chunks (:class:`~streamtopic.corpus.DocChunk`) as :class:`_Docs`."""
    import scipy.sparse as sp

    index = term_index(vocab)
    V = len(vocab)
    blocks = [to_global(ch, index, V)[0] for ch in chunks]
    H = sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, V))
    H.sum_duplicates()
    H = H[np.flatnonzero(np.diff(H.indptr))]  # documents with no token in the vocabulary
    H.sort_indices()
    words, local = np.unique(H.indices, return_inverse=True)  # order kept within rows
    return _Docs(H.indptr.astype(np.int64), local.astype(np.int32).ravel(),
                 H.data.astype(np.float64), words.astype(np.int64))


def _piece(docs: _Docs, start: int, stop: int) -> _Docs:
    """Documents ``start:stop`` of ``docs``, over their own distinct words."""
    p0, p1 = int(docs.indptr[start]), int(docs.indptr[stop])
    cols = docs.words[docs.indices[p0:p1]]
    words, local = np.unique(cols, return_inverse=True)
    return _Docs(docs.indptr[start:stop + 1] - p0, local.astype(np.int32).ravel(),
                 docs.data[p0:p1], words)


def _piece_bounds(docs: _Docs, n: int) -> list[tuple[int, int]]:
    """Document ranges cutting ``docs`` into ``n`` pieces (fewer when it has fewer documents)
    of about equal tokens."""
    if n <= 1 or docs.n_docs < 2:
        return [(0, docs.n_docs)]
    ends = np.cumsum(np.add.reduceat(docs.data, docs.indptr[:-1]))  # every document has tokens
    cuts = np.searchsorted(ends, ends[-1] * np.arange(1, n) / n) + 1
    bounds = np.unique(np.concatenate([[0], cuts, [docs.n_docs]]))  # cuts ≤ n_docs
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=False)]


def _split_sample(docs: list[Any], sizes: np.ndarray) -> list[Any]:
    """The cached sample's partitions (persisted :class:`_Docs`), or, when there are fewer
    than ``SAMPLE_PIECES``, about ``SAMPLE_PIECES`` pieces of about equal tokens: each
    partition cut in proportion to its tokens (:func:`_piece_bounds`), the pieces persisted
    in its place, in order."""
    from dask.delayed import delayed

    if len(docs) >= SAMPLE_PIECES or not len(docs):
        return docs
    share = sizes[:, 1] / max(float(sizes[:, 1].sum()), 1.0)
    cuts = np.maximum(np.round(share * SAMPLE_PIECES), 1).astype(int)
    (bounds,) = compute([delayed(_piece_bounds, pure=True)(d, int(n))
                         for d, n in zip(docs, cuts, strict=True)], progress=False)
    out: list[Any] = []
    for d, b in zip(docs, bounds, strict=True):
        out += (persist([delayed(_piece, pure=True)(d, lo, hi) for lo, hi in b], False)
                if len(b) > 1 else [d])
    return out


def _sizes(docs: _Docs) -> tuple[int, float]:
    return docs.n_docs, docs.tokens


@lru_cache(maxsize=2)
def _load_beta(path: str) -> np.ndarray:
    """The topics word-major (V×K), memory-mapped: read once per process per pass."""
    return cast("np.ndarray", np.load(path, mmap_mode="r"))


# (the words' global ids (U,), their U×K expected counts, log-likelihood, tokens, E-step
# maps, the sums of Minka's fixed point for α (K,) and its denominator (see
# :func:`_minka_sums`)); summed (:func:`_add`): (None, V×K counts, ...)
_Summary = tuple[np.ndarray | None, np.ndarray, float, float, int, np.ndarray, float]
# A partition's documents' topic counts N_d (n_docs × K, float64) and their change in the
# pass that made them (float32: it only extrapolates the next pass' start)
_State = tuple[np.ndarray, np.ndarray]


def _minka_sums(counts: np.ndarray, alpha: np.ndarray, learn: bool) -> tuple[np.ndarray, float]:
    """The sums over documents of Minka's fixed point for a Dirichlet's α from the documents'
    topic counts N_d (n_docs × K): Σ_d ψ(N_dk + α_k) − ψ(α_k) (K,) and
    Σ_d ψ(n_d + α₀) − ψ(α₀); zeros when not ``learn``."""
    if not learn or counts.shape[0] == 0:
        return np.zeros(alpha.size), 0.0
    from scipy.special import digamma

    a = alpha.astype(np.float64)
    num = (digamma(counts + a) - digamma(a)).sum(axis=0)
    a0 = float(a.sum())
    den = float((digamma(counts.sum(axis=1) + a0) - digamma(a0)).sum())
    return num, den


def _estep(docs: _Docs, state: _State | None, beta_path: str, alpha: np.ndarray,
           theta_tol: float = THETA_TOL, learn: bool = False) -> tuple[_State, _Summary]:
    """E-step of one partition (CVB0, :func:`~streamtopic._kernels.cvb0_estep`). The
    documents' expected topic counts (n_docs × K) start from the previous pass' ``state``
    (never modified), extrapolated by their change in that pass, or, when None, from
    uniform; returns the new state and the partition's summary."""
    beta_t = np.ascontiguousarray(_load_beta(beta_path)[docs.words])  # U×K float32
    K = beta_t.shape[1]
    warm = state is not None
    if state is not None:
        counts, step = np.array(state[0], dtype=np.float64), np.array(state[1], np.float32)
    else:
        counts, step = np.empty((docs.n_docs, K)), np.empty((docs.n_docs, K), np.float32)
    out = np.zeros(beta_t.shape)
    iters, loglik = cvb0_estep(docs.indptr, docs.indices, docs.data, beta_t, alpha,
                               theta_tol, THETA_MAX_ITER, counts, step, warm, out)
    return (counts, step), (docs.words, out, float(loglik), docs.tokens, int(iters),
                            *_minka_sums(counts, alpha, learn))


def _estep_read(chunks: list[Any], vocab: list[str], beta_path: str, alpha: np.ndarray
                ) -> tuple[_Summary, int]:
    """E-step of a partition read now (the full pass' partitions outside the sample), from
    uniform topic counts to ``FULL_PASS_THETA_TOL``; returns its summary and its number of
    documents."""
    docs = _docs_of(chunks, vocab)
    return _estep(docs, None, beta_path, alpha, FULL_PASS_THETA_TOL)[1], docs.n_docs


def _add(V: int, *parts: _Summary) -> _Summary:
    """The sum of partitions' summaries, V×K (``words`` None), in the order given: the same
    bits on every run."""
    out = np.zeros((V, parts[0][1].shape[1]))
    for p in parts:
        if p[0] is None:
            out += p[1]
        else:
            add_rows(out, p[0], p[1])
    return (None, out, sum(p[2] for p in parts), sum(p[3] for p in parts),
            sum(p[4] for p in parts), np.sum([p[5] for p in parts], axis=0),
            sum(p[6] for p in parts))


def _summary(x: tuple[_Summary, int]) -> _Summary:
    return x[0]


def _n_docs(x: tuple[_Summary, int]) -> int:
    return x[1]


# ----------------------------------------------------------------------------- client side


def _part_weights(corpus: Any) -> np.ndarray:
    """Estimated size of each partition (P,): its recorded weight (a store's cached
    documents: their bytes), else its share of its source's range (bytes, rows or members)
    times the source's bytes on disk."""
    extent: dict[Any, int] = {}
    for p in corpus.parts:
        extent[p.source] = max(extent.get(p.source, 0), p.stop)
    return np.array([p.opt("weight") if p.opt("weight") is not None
                     else p.source.size * (p.stop - p.start) / max(extent[p.source], 1)
                     for p in corpus.parts], dtype=np.float64)


def _batch_size(weight: np.ndarray, taken: int, tokens: float, target: float) -> int:
    """Partitions to read next (in ``weight``'s order, from ``taken``) to reach ``target``
    tokens: one per worker first, then as many as the tokens per unit of weight read so far
    predict."""
    left = weight.size - taken
    if not np.isfinite(target):
        return left
    if taken == 0:
        return min(left, max(2, n_workers()))
    rate = tokens / max(float(weight[:taken].sum()), 1e-300)
    need = (target - tokens) / max(rate, 1e-300)
    return int(min(left, np.searchsorted(np.cumsum(weight[taken:]), need) + 1))


def _cache_sample(corpus: Any, vocab_d: Any, sample_tokens: float, seed: int | None,
                  progress: bool) -> tuple[np.ndarray, list[Any], np.ndarray]:
    """Read whole partitions, in an order random under ``seed``, until ``sample_tokens``
    tokens; each is tokenised once and persisted as :class:`_Docs`.

    Returns
    -------
    taken : ndarray of int, shape (P_s,)
        Indices of the sampled partitions in ``corpus.parts``.
    docs : list of P_s persisted delayed :class:`_Docs`
    sizes : ndarray of shape (P_s, 2)
        Documents and tokens of each.
    """
    from dask.delayed import delayed

    order = np.random.default_rng(seed).permutation(corpus.npartitions)
    weight = _part_weights(corpus)[order]
    docs: list[Any] = []
    sizes = np.zeros((0, 2))
    with Stage("refine: reading the sample", enabled=progress) as stage:
        while len(docs) < order.size and sizes[:, 1].sum() < sample_tokens:
            m = _batch_size(weight, len(docs), float(sizes[:, 1].sum()), sample_tokens)
            sub = corpus.subset(order[len(docs):len(docs) + m])
            new = [delayed(_docs_of, pure=True)(p, vocab_d) for p in sub.to_bag().to_delayed()]
            new = persist(new, False)
            (got,) = compute([delayed(_sizes, pure=True)(d) for d in new], progress=False)
            sizes = np.vstack([sizes, np.asarray(got, dtype=np.float64).reshape(-1, 2)])
            docs += new
            n, t = sizes.sum(axis=0)
            stage.update(max(t / sample_tokens, len(docs) / order.size),
                         f"{int(n):,} documents, {int(t):,} tokens")
    return order[:len(docs)], docs, sizes


class _Topics:
    """The current topics (K×V) and the scratch file that carries them to the workers."""

    def __init__(self, beta: np.ndarray, work: str, prior: np.ndarray | None = None,
                 pinned: np.ndarray | None = None, named_share: float = 0.0) -> None:
        self.work, self.version = work, 0
        self.prior = prior  # K×V expected counts of documents not in the corpus, or None
        self.pinned = pinned
        self.named = None if pinned is None else named_entries(pinned)
        self.named_share = float(named_share)
        self._set(beta)

    def _set(self, estimate: np.ndarray) -> None:
        """The topics' estimate (K×V), ``pinned`` entries held at 0 and rows renormalised:
        ``estimate`` (what EM gives); and ``beta``, the topics the E-step reads: the same,
        but each named topic mixed with its named words (:func:`named_mixture`)."""
        if self.pinned is not None:
            estimate = np.where(self.pinned, 0.0, estimate)
            estimate /= estimate.sum(axis=1, keepdims=True)
        self.estimate = estimate
        self.beta = (estimate if self.named is None
                     else named_mixture(estimate, self.named, self.named_share))

    def publish(self) -> str:
        """Write βᵀ (V×K, float32: the E-step's precision) for the workers; returns the
        path."""
        self.version += 1
        path = os.path.join(self.work, f"beta-{self.version}.npy")
        with written_aside(path) as tmp, open(tmp, "wb") as fh:
            np.save(fh, np.ascontiguousarray(self.beta.T, dtype=np.float32))
        old = os.path.join(self.work, f"beta-{self.version - 2}.npy")
        if os.path.exists(old):
            os.remove(old)
        return path

    def sum(self, summaries: list[Any]) -> Any:
        """The delayed sum of delayed partitions' summaries (:func:`_add`), in a fixed order:
        groups of ``ADD_GROUP`` partitions' U×K counts each added into one V×K array, then a
        tree reduction of those."""
        from dask.delayed import delayed

        add = partial(_add, self.beta.shape[1])
        groups = [delayed(add, pure=True)(*summaries[i:i + ADD_GROUP])
                  for i in range(0, len(summaries), ADD_GROUP)]
        return groups[0] if len(groups) == 1 else delayed_tree(add, groups)

    def m_step(self, total: _Summary, eta: float) -> float:
        """β ← (N + η) / (N_k + Vη) from the summed E-step; returns its log-likelihood per
        token (at the topics the E-step used)."""
        counts_t, loglik, tokens = total[1], total[2], total[3]  # V×K (:func:`_add`)
        V = self.beta.shape[1]
        N = counts_t.T if self.prior is None else counts_t.T + self.prior  # K×V counts
        self.totals = N.sum(axis=1)
        self._set((N + eta) / (self.totals + V * eta)[:, None])
        return loglik / max(tokens, 1.0)


def _em_on_sample(topics: _Topics, docs: list[Any], *, passes: int | None, max_passes: int,
                  tol: float, alpha: np.ndarray, eta: float, learn: bool,
                  result: RefineResult, progress: bool, accelerate: bool = ACCELERATE
                  ) -> list[Any]:
    """EM passes over the cached sample until the log-likelihood converges (or ``passes``);
    records them in ``result`` (``result.alpha``: the α of the last pass, moved by one step
    of Minka's fixed point after each pass when ``learn``); returns the last pass'
    persisted topic counts N_d per partition. With ``accelerate`` (and ``passes`` None),
    the passes are SQUAREM's cycles (:func:`_squarem`)."""
    from dask.delayed import delayed

    counts: list[Any] = [None] * len(docs)

    def em_pass() -> float:
        """One pass from the current topics: E-step, M-step; its log-likelihood per token
        (at the topics it started from)."""
        nonlocal counts, alpha
        t0 = time.perf_counter()
        path = topics.publish()
        outs = [delayed(_estep, nout=2, pure=True)(d, n, path, alpha, THETA_TOL, learn)
                for d, n in zip(docs, counts, strict=True)]
        with bar.tasks():
            counts, total = persist(
                ([o[0] for o in outs], topics.sum([o[1] for o in outs])), False)
            (total,) = compute(total, progress=False)
        loglik = topics.m_step(total, eta)
        result.loglik_per_token.append(loglik)
        result.alpha = alpha
        alpha = _minka_step(alpha, total[5], total[6]) if learn else alpha
        bar.done_pass(loglik)
        result.theta_iterations.append(int(total[4]))
        result.seconds.append(time.perf_counter() - t0)
        result.passes += 1
        return loglik

    with Passes("refine", passes=passes, max_passes=max_passes, tol=tol,
                enabled=progress) as bar:
        if accelerate and passes is None:
            _squarem(topics, em_pass, max_passes, tol, result)
        else:
            for _ in range(passes if passes is not None else max_passes):
                em_pass()
                f = result.loglik_per_token
                result.converged = len(f) > 1 and (f[-1] - f[-2]) < tol * abs(f[-1])
                if passes is None and result.converged:
                    break
    return counts


def _squarem(topics: _Topics, em_pass: Callable[[], float], max_passes: int, tol: float,
             result: RefineResult) -> None:
    """EM accelerated by SQUAREM (Varadhan and Roland, "Simple and globally convergent
    methods for accelerating the convergence of any EM algorithm", 2008), on the topics'
    estimates (K×V). A cycle is three passes: two EM steps x₀ → x₁ → x₂, then, with
    r = x₁ − x₀, v = x₂ − x₁ − r and the step a = −‖r‖/‖v‖ (at most −1:
    ``SQUAREM_MIN_STEP``), the extrapolated
    x′ = x₀ − 2a·r + a²·v (entries below ``EXTRAPOLATION_FLOOR`` raised to it, topics
    renormalised), and one EM step from x′, which starts the next cycle. A pass' likelihood
    is that of the topics it started from, so the safeguard is exact: when x′ is less
    likely than the best topics so far, the next cycle starts from x₂ instead
    (``result.rejected``). Only the plain EM step x₁ → x₂ tests convergence (the same rule
    as plain EM: a relative gain below ``tol``); an extrapolation's gain says nothing about
    it. The topics left in ``topics`` are the EM step of the most likely topics evaluated.
    Deterministic: the same passes on the same documents give the same bits."""
    best = -np.inf
    kept: tuple[np.ndarray, np.ndarray] | None = None

    def evaluate() -> float:
        nonlocal best, kept
        loglik = em_pass()
        if loglik >= best:
            best, kept = loglik, (topics.estimate.copy(), topics.totals.copy())
        return loglik

    while result.passes < max_passes:
        x0 = topics.estimate.copy()
        before = evaluate()
        if result.passes >= max_passes:
            break
        x1 = topics.estimate.copy()
        after = evaluate()
        result.converged = after - before < tol * abs(after)  # plain EM's rule
        if result.converged or result.passes >= max_passes:
            break
        x2 = topics.estimate.copy()
        r, v = x1 - x0, x2 - 2.0 * x1 + x0
        a = min(-float(np.linalg.norm(r)) / max(float(np.linalg.norm(v)), 1e-300),
                -SQUAREM_MIN_STEP)
        x = np.maximum(x0 - 2.0 * a * r + a * a * v, EXTRAPOLATION_FLOOR)
        topics._set(x / x.sum(axis=1, keepdims=True))
        result.extrapolations.append(a)
        if evaluate() < best:
            result.rejected += 1
            topics._set(x2)
    if kept is not None:
        topics._set(kept[0])
        topics.totals = kept[1]


def _minka_step(alpha: np.ndarray, num: np.ndarray, den: float) -> np.ndarray:
    """One step of Minka's fixed point for a Dirichlet's α from the E-step's sums
    (:func:`_minka_sums`): α_k ← α_k num_k / den, kept within [``ALPHA_MIN``,
    ``ALPHA_MAX``]; (K,) float32."""
    if not den > 0:
        return alpha
    new = alpha.astype(np.float64) * num / den
    step: np.ndarray = np.clip(new, ALPHA_MIN, ALPHA_MAX).astype(np.float32)
    return step


def _full_pass(topics: _Topics, corpus: Any, taken: np.ndarray, docs: list[Any],
               counts: list[Any], vocab_d: Any, alpha: np.ndarray, eta: float,
               progress: bool) -> tuple[float, float, int]:
    """E-step of every document with the current topics (the sample from its cache and warm
    topic counts, the other partitions read now), then the M-step over the whole corpus.
    Returns the log-likelihood per token, the tokens and the documents."""
    from dask.delayed import delayed

    path = topics.publish()
    cached = [delayed(_estep, nout=2, pure=True)(d, n, path, alpha)[1]
              for d, n in zip(docs, counts, strict=True)]
    rest = corpus.subset(np.setdiff1d(np.arange(corpus.npartitions), taken))
    read = [delayed(_estep_read, pure=True)(p, vocab_d, path, alpha)
            for p in rest.to_bag().to_delayed()]
    summaries = cached + [delayed(_summary, pure=True)(r) for r in read]
    n_rest = delayed(sum)([delayed(_n_docs, pure=True)(r) for r in read])
    total, n_rest = compute(topics.sum(summaries), n_rest, progress=progress,
                            label="refine: full pass")
    return topics.m_step(total, eta), total[3], int(n_rest)


#: The constraints of :func:`refine_topics`' parameters (:mod:`streamtopic._params`).
_PARAMS: dict[str, list[Constraint]] = {
    "passes": [Interval(Integral, 1, None), None],  # None: until EM converges
    "max_passes": [Interval(Integral, 1, None)],
    "tol": [Interval(Real, 0, None)],
    "sample_tokens": [Interval(Integral, 1, None), None],  # None: the whole corpus
    # alpha (a float or K floats) is checked by _prior
    "eta": [Interval(Real, 0, None, closed="neither")],
    "seed": [Interval(Integral, 0, None), None],
    "scratch": ["path", None],
    "progress": ["boolean"],
    "learn_alpha": ["boolean"],
    "named_share": [Interval(Real, 0, 1, closed="left")],
    "accelerate": ["boolean"],
}


def _start(components: np.ndarray, V: int) -> np.ndarray:
    """The starting topics (K×V), every entry raised by ``START_FLOOR`` and rows
    renormalised: a word with β = 0 in every topic still has a finite likelihood and takes
    part in the first E-step. Negative entries are an error."""
    beta = np.asarray(components, dtype=np.float64)
    if beta.ndim != 2 or not np.isfinite(beta).all() or (beta < 0).any():
        raise ValueError("components must be a finite, non-negative K×V matrix")
    beta = beta + START_FLOOR
    return cast("np.ndarray", beta / beta.sum(axis=1, keepdims=True))


def named_entries(pinned: np.ndarray) -> np.ndarray:
    """The named words of each topic (K×V bool) from the ``pinned`` entries (K×V bool,
    :func:`~streamtopic.seeding.pinned_entries`): a word pinned out of some topics is a
    named word of each topic it is not pinned out of."""
    held = np.asarray(pinned, dtype=bool)
    somewhere = np.asarray(held.any(axis=0), dtype=bool)
    named: np.ndarray = ~held & somewhere[None, :]
    return named


def named_mixture(estimate: np.ndarray, named: np.ndarray, share: float) -> np.ndarray:
    """The topics the E-step reads (K×V): each topic k with named words (``named``, K×V
    bool) the mixture (1 − share)·β_k + share·s_k, s_k its estimate ``estimate`` (K×V)
    restricted to its named words and renormalised; the other topics (and a named topic
    whose named words have no mass) as they are."""
    rows = np.flatnonzero((np.where(named, estimate, 0.0).sum(axis=1) > 0) & named.any(axis=1))
    if share <= 0 or rows.size == 0:
        return estimate
    seed = np.where(named[rows], estimate[rows], 0.0)
    mixed: np.ndarray = estimate.copy()
    mixed[rows] = (1.0 - share) * estimate[rows] + share * seed / seed.sum(axis=1, keepdims=True)
    return mixed


def prior_alpha(R: np.ndarray, prevalence: np.ndarray, prior: str | None = None
                ) -> float | np.ndarray:
    """The refinement's α from the spectral stages' K×K topic-topic matrix ``R`` and (K,)
    ``prevalence``, under ``prior`` (default :data:`PRIOR`): 'fixed' gives ``ALPHA``,
    'spectral' the estimated α (K,)."""
    prior = PRIOR if prior is None else prior
    if prior == "fixed":
        return ALPHA
    if prior == "spectral":
        return estimate_alpha(R, prevalence)
    raise ValueError(f"prior={prior!r}: must be 'fixed' or 'spectral'")


def _prior(alpha: float | np.ndarray, K: int) -> np.ndarray:
    """The E-step's α: (K,) float32, positive and finite (a float: the same for each topic)."""
    a = np.asarray(alpha, dtype=np.float64)
    a = np.full(K, float(a)) if a.ndim == 0 else a
    if a.shape != (K,) or not (np.isfinite(a).all() and (a > 0).all()):
        raise ValueError(f"alpha={alpha!r}: must be positive and finite, a float or one per "
                         f"topic ({K})")
    return a.astype(np.float32)


@validated(_PARAMS)
def refine_topics(
    components: np.ndarray,
    corpus: Any,
    vocab: list[str],
    *,
    passes: int | None = None,
    max_passes: int = MAX_PASSES,
    tol: float = TOL,
    sample_tokens: int | None = SAMPLE_TOKENS,
    alpha: float | np.ndarray = ALPHA,
    eta: float = ETA,
    learn_alpha: bool = LEARN_ALPHA,
    seed: int | None = 0,
    scratch: str | None = None,
    progress: bool = False,
    pinned: np.ndarray | None = None,
    prior_counts: np.ndarray | None = None,
    named_share: float = NAMED_SHARE,
    accelerate: bool = ACCELERATE,
) -> RefineResult:
    """EM from the topics ``components`` on a cached sample of ``corpus``, then one full pass.

    Parameters
    ----------
    components : ndarray of shape (K, V)
        Starting topics (rows sum to 1), e.g. an anchor-word model's ``components_``. Words
        whose column is the same in every topic (e.g. their unigram probability) carry no
        topic information; EM gives them rows by fold-in.
    corpus : path, list of paths or :class:`~streamtopic.corpus.Corpus`
        The training documents; tokens outside ``vocab`` are ignored.
    vocab : list of str
        The V words of ``components``.
    passes : int, optional
        Exactly this many EM passes on the sample (the papers' experiments). Default: until
        the log-likelihood per token changes by less than ``tol`` (relative) from one pass to the
        next, at most ``max_passes``.
    max_passes : int
        Cap on the passes when ``passes`` is None.
    tol : float
        Relative change of the training log-likelihood per token below
        which EM stops. The default, 3e-4, was chosen on KOS and 20 Newsgroups from their
        spectral topics (see ``TOL``).
    sample_tokens : int or None
        In-vocabulary tokens of the cached sample (whole partitions, drawn at random under
        ``seed``); the cache takes 12 bytes per distinct (document, word) plus 16K bytes per
        document. None: the whole corpus. The default, 50M, is the smallest sample whose
        refined topics beat the spectral ones on a 102M-token semi-synthetic corpus, in
        0.55× its ingest time (see ``SAMPLE_TOKENS``).
    alpha : float or ndarray of shape (K,)
        Pseudo-count of each topic in the documents' topic counts: the Dirichlet prior of
        θ_d, symmetric (a float) or one per topic (e.g. an anchor-word model's estimate,
        :func:`~streamtopic.hyperparameters.estimate_alpha`). Positive.
    eta : float
        Pseudo-count of the topics, per word.
    learn_alpha : bool
        Re-estimate α from ``alpha`` after each pass on the sample: one step of Minka's fixed
        point ("Estimating a Dirichlet distribution", 2000) on the documents' topic counts
        N_d, α_k ← α_k Σ_d [ψ(N_dk + α_k) − ψ(α_k)] / Σ_d [ψ(n_d + α₀) − ψ(α₀)]. The full
        pass uses the last α (``RefineResult.alpha``).
    seed : int or None
        Seed of the sample's partitions (None: fresh entropy).
    scratch : str, optional
        Directory for the topics the workers read (default: a temporary directory); shared
        by the workers on a cluster. A subdirectory ``.streamtopic-refine-*`` is made,
        owned by this process and removed at the end; those of killed processes are removed.
    progress : bool
        Show a progress bar per pass.
    pinned : ndarray of bool of shape (K, V), optional
        Entries of the topics held at 0 in every pass: a named anchor's words in the topics
        other than theirs (:func:`streamtopic.seeding.pinned_entries`), so that every token
        of them stays with the named topic, which keeps its identity.
    named_share : float in [0, 1)
        With ``pinned``: the E-step reads each named topic (the topics the pinned words are
        not pinned out of) as (1 − ``named_share``) times its estimate plus ``named_share``
        times its estimate on its named words (:func:`named_mixture`), so that it stays about
        them (see the module's docstring). The topics returned are the estimates, without
        the mixture. 0: the estimates themselves.
    prior_counts : ndarray of shape (K, V), optional
        Expected topic-word counts of documents outside ``corpus`` that the topics already
        describe (a model's earlier training documents), added to every M-step: EM over new
        documents then continues the topics with the old documents' statistics held fixed
        (incremental EM), at the cost of the new documents alone.
    accelerate : bool
        Accelerate EM by SQUAREM when it runs to convergence (``passes`` None; see
        :data:`ACCELERATE`): cycles of two EM steps, an extrapolation along them and an EM
        step from there, started again from the plain step when the extrapolation is less
        likely. False: plain EM passes.

    Returns
    -------
    RefineResult
    """
    from dask.delayed import delayed

    beta = np.asarray(components)
    K, V = beta.shape if beta.ndim == 2 else (0, -1)
    if len(vocab) != V:
        raise ValueError(f"vocab has {len(vocab)} words; components have {V} columns")
    prior = _prior(alpha, K)
    c = corpus if isinstance(corpus, Corpus) else read_corpus(corpus)
    vocab_d = delayed(list(vocab), pure=True, traverse=False)
    parent = scratch if scratch is not None else tempfile.gettempdir()
    collect(parent, lambda n: n.startswith(REFINE_PREFIX))
    owner = ExitStack()
    work = owner.enter_context(owned_dir(parent, REFINE_PREFIX))
    result = RefineResult(_start(beta, V), np.full(K, 1.0 / K), partitions=c.npartitions)
    try:
        t0 = time.perf_counter()
        goal = float("inf") if sample_tokens is None else float(sample_tokens)
        taken, docs, sizes = _cache_sample(c, vocab_d, goal, seed, progress)
        result.read_seconds = time.perf_counter() - t0
        result.sample_partitions, result.sample_partition_indices = int(taken.size), taken
        result.sample_docs, result.sample_tokens = (int(x) for x in sizes.sum(axis=0))
        if result.sample_tokens == 0:
            raise ValueError("the corpus has no token in the vocabulary")
        docs = _split_sample(docs, sizes)
        result.sample_pieces = len(docs)
        if prior_counts is not None and np.shape(prior_counts) != (K, V):
            raise ValueError(f"prior_counts: expected shape {(K, V)}, got "
                             f"{np.shape(prior_counts)}")
        topics = _Topics(result.components, work, prior_counts, pinned, named_share)
        counts = _em_on_sample(topics, docs, passes=passes, max_passes=max_passes, tol=tol,
                               alpha=prior, eta=eta, learn=learn_alpha, result=result,
                               progress=progress, accelerate=accelerate)
        result.corpus_docs, result.corpus_tokens = result.sample_docs, result.sample_tokens
        if taken.size < c.npartitions:
            t0 = time.perf_counter()
            ll, tokens, n_rest = _full_pass(topics, c, taken, docs, counts, vocab_d,
                                            result.alpha, eta, progress)
            result.full_pass, result.full_pass_loglik_per_token = True, float(ll)
            result.corpus_tokens = int(tokens)
            result.corpus_docs = result.sample_docs + n_rest
            result.full_pass_seconds = time.perf_counter() - t0
    finally:
        owner.close()  # removes ``work``
    result.components, result.topic_tokens = topics.estimate, topics.totals
    result.prevalence = topics.totals / max(float(topics.totals.sum()), 1e-300)
    return result
