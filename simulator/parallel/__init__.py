"""Parallelism strategies written as rank programs, each checked against one device.

An MLP (``mlp``, ``layers``): pipeline schedules as data (``schedules``; several stages per rank in
``schedules_looped`` and ``schedules_v``; their bubbles in closed form in ``bubbles``) run by ``pipeline``; data
parallelism and ZeRO (``data``, ``buckets``, ``zero``); tensor parallelism (``tensor``, ``tensor_layers``); the three
together (``compose``).

A transformer (``transformer``, ``transformer_ops``, ``transformer_block``, ``transformer_step``): tensor
parallelism by heads and Megatron sequence parallelism (``sequence``), context parallelism by ring attention
(``context``, ``ring_ops``), a mixture of experts and expert parallelism (``experts``, ``experts_ops``,
``expert_parallel``, ``moe_layer``), the costs in closed form (``transformer_costs``), and all five dimensions
together (``composed_split``, ``compose5d``).
"""

# schedules_looped and schedules_v build on schedules' types, and schedules lists their generators: importing
# schedules first, whichever of the three a program asks for, keeps that cycle from failing.
from . import schedules  # noqa: E402, F401
