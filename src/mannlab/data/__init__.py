"""Real data sets: finding files (``download``) and parsing them, one module per data set.

    download   locate(dataset, RemoteFile, data_dir, download=False): a local copy, else a
               verified download when asked for, else MissingData saying how to get it
    babi       bAbI QA v1.2 (en, en-10k): stories, questions, vocabulary, validation split
    mnist      MNIST IDX files (.gz), pixel sequences, fixed seeded permutation
    strokes    MNIST pen strokes (de Jong 2016): per-digit text files and the numpy encoding
    snli       SNLI 1.0 jsonl: premise, hypothesis, 3-way label
    enwik8     enwik8 bytes with the 90M / 5M / 5M split
    thumos     THUMOS'14 temporal annotations (per-class files) with per-video features
    video_features  per-video (T, D) feature arrays: .npy directory, .npz, HDF5

The task classes that turn these into training batches live in ``mannlab.tasks``.
"""
