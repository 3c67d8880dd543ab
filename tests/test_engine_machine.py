"""Hypothesis state machines over the real engine, checked against brute force after every step
(see engine_machine.py): every buffer kind, the block index, IGPT and IPT, count and time
windows, and each pruning rule alone.  IGPT leaves hold 2 subscriptions, so the quadtree splits
constantly; block-index blocks hold 4 entries, so bands are rebuilt constantly."""

from functools import partial

from engine_machine import make_machine
from skype import Engine
from skype.engine import BLOCK_RULES, BUFFERS, RULES


def _register(name, factory, **window):
    machine = make_machine(factory, **window)
    machine.__name__ = name
    globals()[f"Test{name}"] = machine.TestCase


for _buffer in BUFFERS:
    _register(f"Blocks{_buffer.title()}Count", partial(Engine, buffer=_buffer, block_size=4, bands=3), window=4)
    _register(f"Blocks{_buffer.title()}Time", partial(Engine, buffer=_buffer, block_size=4, bands=3),
              window_seconds=3.0)
    _register(f"Igpt{_buffer.title()}Count", partial(Engine, index="igpt", buffer=_buffer, leaf_capacity=2), window=4)
    _register(f"Igpt{_buffer.title()}Time", partial(Engine, index="igpt", buffer=_buffer, leaf_capacity=2),
              window_seconds=3.0)
_register("IptCskybandCount", partial(Engine, index="ipt", buffer="cskyband", leaf_capacity=2), window=4)
_register("CiqKmaxCount", partial(Engine, index="ciq", buffer="kmax", ciq={"budget": 4, "max_depth": 4}), window=4)
_register("CiqExactTime", partial(Engine, index="ciq", buffer="exact", ciq={"budget": 7, "max_depth": 3}),
          window_seconds=3.0)
for _rule in RULES:
    _register(f"Only{_rule.title()}", partial(Engine, index="igpt", buffer="exact", leaf_capacity=2,
                                              pruning={r: r == _rule for r in RULES}), window=4)
for _rule in BLOCK_RULES:
    _register(f"BlocksOnly{_rule.title()}", partial(Engine, buffer="exact", block_size=4,
                                                    pruning={r: r == _rule for r in BLOCK_RULES}), window=4)
