"""The package's Ray policy: the largest live node a task can land on."""

from __future__ import annotations

from implicit_em.ray_cluster import largest_node


def test_the_largest_node_is_per_kind_over_live_nodes_only():
    nodes = [
        {"Alive": True, "Resources": {"CPU": 4.0}},
        {"Alive": True, "Resources": {"CPU": 2.0, "GPU": 1.0}},
        {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}},  # a dead node holds nothing
    ]
    assert largest_node(nodes) == {"CPU": 4.0, "GPU": 1.0}


def test_no_live_node_holds_nothing():
    assert largest_node([]) == {"CPU": 0, "GPU": 0}
    assert largest_node([{"Alive": False, "Resources": {"CPU": 8.0}}]) == {"CPU": 0, "GPU": 0}
