"""Measuring a trained model: sacreBLEU and chrF on a test split (:mod:`~aiayn.evaluation.scoring`, Section 6.1
reports BLEU), and the model card written from those measurements (:mod:`~aiayn.evaluation.modelcard`).

Nothing is imported here, so ``aiayn.evaluation.modelcard`` (read by the app's first page) stays light.
"""
