"""Hypothesis state machines over the real engine, checked against brute force after every step
(see engine_machine.py): every buffer kind with the block index, IGPT and the cone trees, IPT
(count and time windows), CIQ with kmax, exact, cSkyband and Skyband, non-default cost model,
groups and threshold refresh, and each pruning rule alone.  Cone-tree leaves hold 1-2 postings
and their tails are rebuilt at every few postings.  IGPT leaves hold 2 subscriptions, so the
quadtree splits constantly; block-index blocks hold 4 postings, so bands are rebuilt constantly."""

from functools import partial

from engine_machine import make_machine
from skype import Engine
from skype.engine import BLOCK_RULES, BUFFERS, RULES


def _register(name, factory, **window):
    machine = make_machine(factory, **window)
    machine.__name__ = name
    globals()[f"Test{name}"] = machine.TestCase


for _buffer in BUFFERS:
    _register(f"Blocks{_buffer.title()}Count", partial(Engine, index="blocks", buffer=_buffer, block_size=4, bands=3), window=4)
    _register(f"Blocks{_buffer.title()}Time", partial(Engine, index="blocks", buffer=_buffer, block_size=4, bands=3),
              window_seconds=3.0)
    _register(f"Igpt{_buffer.title()}Count", partial(Engine, index="igpt", buffer=_buffer, leaf_capacity=2), window=4)
    _register(f"Igpt{_buffer.title()}Time", partial(Engine, index="igpt", buffer=_buffer, leaf_capacity=2),
              window_seconds=3.0)
    _register(f"Cone{_buffer.title()}Count", partial(Engine, index="cone", buffer=_buffer,
                                                     cone={"leaf": 2, "tail_min": 2}), window=4)
    _register(f"Cone{_buffer.title()}Time", partial(Engine, index="cone", buffer=_buffer,
                                                    cone={"leaf": 1, "tail_min": 0, "tail_fraction": 0.5}),
              window_seconds=3.0)
_register("IptCskybandCount", partial(Engine, index="ipt", buffer="cskyband", leaf_capacity=2), window=4)
_register("IptSkybandTime", partial(Engine, index="ipt", buffer="skyband", leaf_capacity=2), window_seconds=3.0)
_register("CiqCskybandCount", partial(Engine, index="ciq", buffer="cskyband", ciq={"budget": 4, "max_depth": 4}),
          window=4)
_register("CiqSkybandTime", partial(Engine, index="ciq", buffer="skyband", skyband_ratio=0.5,
                                    ciq={"budget": 2, "max_depth": 3}), window_seconds=3.0)
# non-default cost model, alpha groups and threshold refresh
_register("IgptTunedCount", partial(Engine, index="igpt", leaf_capacity=2, groups=2, theta_refresh=0.5,
                                    cost={"query_cost": 0.5, "stop_after": 1, "nmax_factor": 1,
                                          "refresh_factor": 1.0, "barrier": "window"}), window=5)
_register("IgptTunedTime", partial(Engine, index="igpt", leaf_capacity=3, groups=1, theta_refresh=0.0,
                                   cost={"c_del": 5.0, "barrier": "factor", "barrier_factor": 1.0}),
          window_seconds=2.5)
_register("BlocksTunedTime", partial(Engine, index="blocks", block_size=5, bands=1, theta_refresh=0.0,
                                     cost={"query_cost": 0.5, "stop_after": 1, "barrier": "window"}),
          window_seconds=2.5)
_register("CiqKmaxCount", partial(Engine, index="ciq", buffer="kmax", ciq={"budget": 4, "max_depth": 4}), window=4)
_register("CiqExactTime", partial(Engine, index="ciq", buffer="exact", ciq={"budget": 7, "max_depth": 3}),
          window_seconds=3.0)
for _rule in RULES:
    _register(f"Only{_rule.title()}", partial(Engine, index="igpt", buffer="exact", leaf_capacity=2,
                                              pruning={r: r == _rule for r in RULES}), window=4)
for _rule in BLOCK_RULES:
    _register(f"BlocksOnly{_rule.title()}", partial(Engine, index="blocks", buffer="exact", block_size=4,
                                                    pruning={r: r == _rule for r in BLOCK_RULES}), window=4)
