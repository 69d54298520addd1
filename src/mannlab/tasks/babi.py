"""bAbI question answering as a task: read the facts, then the question, answer at the end.

    task = mannlab.tasks.make("babi", tasks=[1, 4, 9, 10, 11, 14], language="en-10k")
    inputs, targets, mask = task.sample(32, seed)                 # split="train" | "valid" | "test"

Parameters: ``tasks`` (bAbI task numbers, trained jointly), ``language`` ("en" = 1k,
"en-10k"), ``data_dir`` (where the archive or its unpacked directory is; default
$MANNLAB_DATA, else ~/.cache/mannlab; ``download=True`` fetches it), ``fact_encoder`` (below; ``encoding``
is its older name, still accepted), ``word_size`` and ``fact_size`` (the GRU encoder's word
embedding and fact vector sizes), ``max_facts`` (the most recent facts kept before a
question, 0 = all), ``answer_steps`` (blank steps after the question; the answer is scored
at the last step, 0 = at the question itself), ``split_seed`` (the seeded 10% of each task's
training questions held out as "valid").

Fact encoders (V = word vocabulary size; two flag channels mark question and answer steps):

- ``bow``: one step per sentence, input ``[u; v; flags]`` with ``u = sum_j (1 - j/J) e(w_j)``
  and ``v = sum_j (1 - 2j/J) e(w_j)`` over the J words of the sentence (e = one-hot). The
  position encoding of Sukhbaatar et al. (2015), ``sum_j l_j * A e(w_j)`` with
  ``l_kj = (1 - j/J) - (k/d)(1 - 2j/J)``, equals ``A u - diag(k/d) A v``, so the model's
  own input layer can learn it exactly (and the plain bag of words is ``2u - v``).
- ``gru``: the D-NTM paper's fact representation (appendix A.1.1): one step per sentence,
  the sentence's words go through a word embedding and a GRU, and the GRU's final state is
  the fact vector the memory model reads, ``[GRU(words); flags]``; the question is encoded
  by the same GRU, answer steps (no words) by zeros. The encoder is trained jointly with the
  model: the task's ``input_kind`` is "sentences", and mannlab.wrappers puts the
  registered model behind a ``GRUFactEncoder`` (``FactEncoded``). The task's
  inputs are then the word ids of each step's sentence (``[ids 1..V, 0 = padding; flags]``,
  ``input_size`` = longest sentence + 2), which only that module reads.
- ``bigru``: as ``gru`` with a bidirectional GRU (fact_size / 2 per direction): the forward
  state after the last word and the backward state after the first. A one-direction state
  forgets a sentence's first words (bAbI's subject: "mary moved to the bathroom"), so on
  task 1 the model cannot tell whose fact it reads; the D-NTM recipes use this one.
- ``words``: one step per word, input ``[e(w); end-of-sentence; flags]``, for models that
  encode sentences themselves (a recurrent controller reading word by word).

Targets are one-hot over the answer classes at the scored step: softmax cross-entropy
(metric ``ce``), ``error`` = fraction of questions answered wrong (``CategoricalTask``). The
training loop's validation also logs ``error/qaN`` per bAbI task, their mean
(``mean_group_error``) and ``failed_groups`` (tasks above 5% error). Per-task errors of a
whole split: ``mannlab.tasks.dataset.evaluate_split`` (``mannlab eval RUN --split test``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mannlab.data import babi as babi_data
from mannlab.errors import ConfigError
from mannlab.tasks.base import Example, check_int
from mannlab.tasks.dataset import DatasetTask

FACT_ENCODERS = ("bow", "gru", "bigru", "words")
#: the encoders that run a GRU over each sentence
GRU_ENCODERS = ("gru", "bigru")
ENCODINGS = FACT_ENCODERS  # the older name


def _load(tasks: tuple[int, ...], language: str, data_dir: str | None, download: bool) -> dict:
    return babi_data.load_babi(tasks, language, data_dir, download=download)


class BabiTask(DatasetTask):
    """Joint bAbI QA over a set of tasks (see the module docstring)."""

    name = "babi"
    input_kinds = ("features", "sentences")  # sentences with the GRU fact encoders
    fail_threshold = 0.05  # the papers count a bAbI task as failed above 5% test error
    defaults = {
        "tasks": [1],
        "language": "en-10k",
        "data_dir": None,
        "fact_encoder": None,
        "encoding": None,
        "word_size": 32,
        "fact_size": 64,
        "max_facts": 50,
        "answer_steps": 1,
        "split_seed": 0,
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        p = self.params
        loaded = _load(tuple(p["tasks"]), p["language"], p["data_dir"], self.download)
        train, valid = babi_data.validation_split(loaded["train"], 0.1, p["split_seed"])
        self.questions = {"train": train, "valid": valid, "test": loaded["test"]}
        self.words, self.answers = babi_data.vocabulary(q for split in self.questions.values() for q in split)
        self._word_id = {w: i for i, w in enumerate(self.words)}
        self._answer_id = {a: i for i, a in enumerate(self.answers)}
        v = len(self.words)
        self.sentence_length = max(
            len(s) for split in self.questions.values() for q in split for s in (*q.facts, q.question)
        )
        if p["fact_encoder"] == "bow":
            self.input_size = 2 * v + 2
            self.input_names = [f"u:{w}" for w in self.words] + [f"v:{w}" for w in self.words]
        elif p["fact_encoder"] in GRU_ENCODERS:
            self.input_size = self.sentence_length + 2
            self.input_names = [f"word{j + 1}" for j in range(self.sentence_length)]
        else:
            self.input_size = v + 3
            self.input_names = list(self.words) + ["eos"]
        self.input_names += ["question", "answer"]
        self.output_size = len(self.answers)
        self.output_names = list(self.answers)
        kept = p["max_facts"] or max(len(q.facts) for q in train)
        self.train_length = kept + 1 + p["answer_steps"]

    def _validate(self, params: dict[str, Any]) -> None:
        super()._validate(params)
        tasks = params["tasks"]
        if isinstance(tasks, int) and not isinstance(tasks, bool):
            tasks = [tasks]
        if (
            not isinstance(tasks, (list, tuple))
            or not tasks
            or any(
                not isinstance(t, int) or isinstance(t, bool) or t not in babi_data.TASK_NAMES for t in tasks
            )
        ):
            raise ConfigError(f"tasks must be a list of bAbI task numbers 1-20, got {params['tasks']!r}")
        params["tasks"] = sorted(set(tasks))
        if params["language"] not in babi_data.LANGUAGES:
            raise ConfigError(
                f"language must be one of {', '.join(babi_data.LANGUAGES)}, got {params['language']!r}"
            )
        encoder, alias = params["fact_encoder"], params["encoding"]
        if encoder is not None and alias is not None and encoder != alias:
            raise ConfigError(
                f"fact_encoder {encoder!r} and its older name encoding {alias!r} "
                f"disagree; give only fact_encoder"
            )
        encoder = encoder if encoder is not None else alias if alias is not None else "bow"
        if encoder not in FACT_ENCODERS:
            raise ConfigError(f"fact_encoder must be one of {', '.join(FACT_ENCODERS)}, got {encoder!r}")
        params["fact_encoder"], params["encoding"] = encoder, None
        check_int(params, "word_size")
        check_int(params, "fact_size")
        if encoder == "bigru" and params["fact_size"] % 2:
            raise ConfigError(
                f"fact_encoder 'bigru' splits fact_size between its two directions: "
                f"it must be even, got {params['fact_size']}"
            )
        check_int(params, "max_facts", minimum=0)
        check_int(params, "answer_steps", minimum=0)
        check_int(params, "split_seed", minimum=0)

    # ------------------------------------------------ what the task feeds

    @property
    def input_kind(self) -> str:
        """ "sentences" (word ids per step, for mannlab.wrappers' GRU fact encoder) with the
        ``gru`` and ``bigru`` encoders, else "features" (vectors any model reads)."""
        return "sentences" if self.params["fact_encoder"] in GRU_ENCODERS else "features"

    @property
    def sentence_encoding(self) -> dict[str, Any]:
        """What the fact encoder needs: vocabulary, sizes, direction and the input layout
        (``sentence_length`` id channels, then ``flags`` flag channels)."""
        return {
            "vocabulary_size": len(self.words),
            "word_size": self.params["word_size"],
            "fact_size": self.params["fact_size"],
            "bidirectional": self.params["fact_encoder"] == "bigru",
            "sentence_length": self.sentence_length,
            "flags": self.input_size - self.sentence_length,
        }

    # ----------------------------------------------------------- the data

    def split_size(self, split: str) -> int:
        return len(self.questions[split])

    def groups(self, split: str, indices: np.ndarray) -> np.ndarray:
        return np.array([self.questions[split][i].task for i in indices], np.int64)

    def group_name(self, group: int) -> str:
        return f"qa{group} {babi_data.TASK_NAMES.get(group, '')}".strip()

    def group_key(self, group: int) -> str:
        return f"qa{group}"

    def encode(self, split: str, indices: np.ndarray, rng: np.random.Generator) -> list[Example]:
        return [self._example(self.questions[split][i]) for i in indices]

    def _example(self, q: babi_data.Question) -> Example:
        facts = q.facts[-self.params["max_facts"] :] if self.params["max_facts"] else q.facts
        sentences = [*facts, q.question]
        encoder = self.params["fact_encoder"]
        if encoder == "bow":
            rows = [self._bow(s) for s in sentences]
        elif encoder in GRU_ENCODERS:
            rows = [self._ids(s) for s in sentences]
        else:
            rows = [row for s in sentences for row in self._words(s)]
        question_steps = max(len(q.question), 1) if encoder == "words" else 1
        steps = len(rows) + self.params["answer_steps"]
        x = np.zeros((steps, self.input_size), np.float32)
        x[: len(rows), : self.input_size - 2] = rows
        x[len(rows) - question_steps : len(rows), -2] = 1.0
        x[len(rows) :, -1] = 1.0
        y = np.zeros((steps, self.output_size), np.float32)
        y[-1, self._answer_id[q.answer]] = 1.0
        mask = np.zeros(steps, np.float32)
        mask[-1] = 1.0
        return x, y, mask

    def _bow(self, sentence: tuple[str, ...]) -> np.ndarray:
        v = len(self.words)
        row = np.zeros(2 * v, np.float32)
        n = len(sentence)
        for j, word in enumerate(sentence, start=1):
            k = self._word_id[word]
            row[k] += 1.0 - j / n
            row[v + k] += 1.0 - 2.0 * j / n
        return row

    def _ids(self, sentence: tuple[str, ...]) -> np.ndarray:
        """Word ids 1..V of the sentence, then 0 up to the longest sentence."""
        row = np.zeros(self.sentence_length, np.float32)
        row[: len(sentence)] = [self._word_id[w] + 1 for w in sentence]
        return row

    def _words(self, sentence: tuple[str, ...]) -> list[np.ndarray]:
        rows = []
        for j, word in enumerate(sentence):
            row = np.zeros(len(self.words) + 1, np.float32)
            row[self._word_id[word]] = 1.0
            row[-1] = float(j == len(sentence) - 1)
            rows.append(row)
        return rows

    # ---------------------------------------------------------- rendering

    def render(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        mask: torch.Tensor,
        logits: torch.Tensor | None = None,
        index: int = 0,
    ) -> str:
        """The story as text (words of each step in order), the answer and the prediction."""
        x = inputs[index].detach().cpu().numpy()
        v = len(self.words)
        scored = np.flatnonzero(mask[index].cpu().numpy() > 0)
        last = int(scored[-1]) if scored.size else x.shape[0] - 1
        lines = [f"babi [{index}]: {last + 1} steps"]
        for t in range(last + 1):
            if self.params["fact_encoder"] == "bow":
                present = np.flatnonzero((x[t, :v] != 0) | (x[t, v : 2 * v] != 0))
                order = sorted(present, key=lambda k: -x[t, k])  # 1 - j/J falls with position
                text = " ".join(self.words[k] for k in order)
            elif self.params["fact_encoder"] in GRU_ENCODERS:
                ids = x[t, : self.sentence_length].round().astype(int)
                text = " ".join(self.words[k - 1] for k in ids if k > 0)
            else:
                text = self.words[int(x[t, :v].argmax())] if x[t, :v].any() else ""
            tag = "Q " if x[t, -2] else "A " if x[t, -1] else "  "
            lines.append(f"{t:4d} {tag}{text}")
        answer = self.answers[int(targets[index, last].argmax())]
        lines.append(f"answer: {answer}")
        if logits is not None:
            lines.append(f"predicted: {self.answers[int(logits[index, last].argmax())]}")
        return "\n".join(lines)
