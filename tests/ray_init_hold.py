"""A Ray runtime-env hook (RAY_RUNTIME_ENV_HOOK=ray_init_hold.hold) for tests: ray.init calls it after it
set its own SIGTERM handler and before it starts the node, so a failpoint here holds a build inside ray.init."""

from localgpt_index.core.failpoints import failpoint


def hold(runtime_env):
    failpoint("ray-init")
    return runtime_env
