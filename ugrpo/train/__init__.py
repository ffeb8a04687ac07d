"""Algorithm 1 and Algorithm 2 of the paper on language models.

* :mod:`ugrpo.train.config`   frozen ``TrainConfig`` + ``load_config(path, overrides)``
* :mod:`ugrpo.train.loss`     ``policy_loss`` (Algorithm 1 / 2, clipping, K3 KL, aggregations)
* :mod:`ugrpo.train.loop`     ``train(cfg, out_dir, resume=...) -> TrainResult``
* ``ugrpo train`` itself is :mod:`ugrpo.cli.commands.train`

Nothing is imported here so that ``import ugrpo.train`` stays cheap.
"""
