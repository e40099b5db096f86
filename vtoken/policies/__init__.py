"""Eviction policies: one interface (`EvictionPolicy`), one registry (`get_policy`)."""

from vtoken.policies.base import EvictionPolicy, PolicyConfig, PolicyState
from vtoken.policies.registry import get_policy, policy_names

__all__ = ["EvictionPolicy", "PolicyConfig", "PolicyState", "get_policy", "policy_names"]
