"""The paper's centralized experiments (``python -m skype.run experiments``) and the
measurement harness shared with ``bench/``."""
