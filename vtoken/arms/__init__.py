"""KV arms: one interface (`KVArm`), one registry (`get_arm`)."""

from vtoken.arms.base import ArmConfig, KVArm, RequestState
from vtoken.arms.plan import Plan
from vtoken.arms.registry import arm_names, get_arm, register_arm

__all__ = ["ArmConfig", "KVArm", "Plan", "RequestState", "arm_names", "get_arm", "register_arm"]
