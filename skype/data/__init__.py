"""Workloads: real GeoNames places, a tweets-like stream, and paper-style subscriptions."""

from skype.data.workloads import DATASETS, Workload, make_subscriptions, make_workload

__all__ = ["DATASETS", "Workload", "make_subscriptions", "make_workload"]
