"""Reporting: text and figures from results, summaries and run directories.

    summaries         what `mannlab train` / `mannlab run` print (end of a run, seeds table)
    text_tables       evaluation tables: metrics per length, errors per group
    run_tables        tables over many runs in the papers' layouts (`mannlab report`)
    group_tables      per-group test errors of data-set runs (bAbI per task)
    figures           memory access, learning curves, curves of several runs (matplotlib)
    read_figures      where the reads land over training (runs with train.val_reads)
    run_figures       a run's figures: what the trainer draws at its end, `mannlab plot`
    proposal_figures  ARMIN figure 2 (of one evaluation: `mannlab eval`)
    proposal_runs     figure 2 and table 3 over several runs (`mannlab compare --proposals`)
    analysis_figures  figures of the analyses (wormhole paths, gradient flow)
    csv_files         CSV files of the analyses

Nothing here builds a model or trains: inputs are rows, summaries, evaluation results and
run files (and a given model, run on one sequence for its memory picture).
"""
