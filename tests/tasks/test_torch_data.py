"""Tasks as torch datasets (mannlab.tasks.torch_data): the trainer's batches through a
DataLoader (any number of workers), a data-set split example by example, char-LM segments."""

import pytest
import torch
from torch.utils.data import DataLoader

from data_files import write_ptb_words
from mannlab import tasks
from mannlab.tasks.charlm import segments
from mannlab.tasks.torch_data import TaskBatches, TaskSplit, TextSegments


def equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_are_the_trainers_batches_for_any_number_of_workers(workers):
    task = tasks.make("copy", width=4, max_length=5)
    loader = DataLoader(TaskBatches(task, 3, seed=7, start=2, stop=7), batch_size=None, num_workers=workers)
    batches = list(loader)
    assert len(loader) == len(batches) == 5
    for i, batch in zip(range(2, 7), batches):
        assert equal(batch, task.sample(3, [7, i]))


def test_endless_batches_and_sample_arguments():
    task = tasks.make("copy", width=4, max_length=5)
    endless = TaskBatches(task, 2, seed=1, length=9)
    with pytest.raises(TypeError, match="no length"):
        len(endless)
    first = [batch for _, batch in zip(range(3), endless)]
    assert all(batch[0].shape[1] == task.sample(2, 0, length=9)[0].shape[1] for batch in first)
    assert equal(first[2], task.sample(2, [1, 2], length=9))


def test_split_dataset_pads_like_the_task(tmp_path):
    text = bytes(range(32, 127)) * 2
    (tmp_path / "enwik8").write_bytes(text)
    task = tasks.make("enwik8", data_dir=str(tmp_path), length=10, split_sizes=[150, 20, 20])
    split = TaskSplit(task, "train")
    assert len(split) == task.split_size("train") == 14
    inputs, _, mask = split[-1]
    assert inputs.shape == (10, 256) and mask.shape == (10,)
    _, ordered = next(task.ordered_batches("train", 4))
    batch = next(iter(DataLoader(split, batch_size=4, collate_fn=split.collate)))
    assert equal(batch, ordered)
    with pytest.raises(IndexError):
        split[14]
    with pytest.raises(TypeError, match="TaskBatches"):
        TaskSplit(tasks.make("copy"))


def test_text_segments_follow_the_streams_in_order(tmp_path):
    task = tasks.make(
        "ptb-char", data_dir=str(write_ptb_words(tmp_path)), bptt=4, valid_batch_size=1, test_batch_size=1
    )
    data = TextSegments(task, "train", 2)
    got = list(DataLoader(data, batch_size=None))
    want = list(segments(task.streams("train", 2), 4))
    assert len(data) == len(got) == len(want) > 1
    assert all(equal(a, b) for a, b in zip(got, want))
    with pytest.raises(RuntimeError, match="in order"):
        list(DataLoader(data, batch_size=None, num_workers=2))
