"""The doctor's decision table (device arch x build arch list x HSA_OVERRIDE_GFX_VERSION), property-tested."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from perfsuite.machine.doctor import gfx

ALL_FAMILY = sorted({a for members in gfx.FAMILIES.values() for a in members})
ARCHS = sorted(set(ALL_FAMILY) | gfx.DATACENTER | {"gfx908", "gfx90a", "gfx803"})

archs = st.sampled_from(ARCHS)
build_lists = st.lists(archs, unique=True, max_size=12)
# Pure functions over a small space: many examples are cheap, and the profile's few (ci: 6) would miss rows.
dense = settings(max_examples=400)
overrides = st.one_of(st.none(), archs.map(gfx.to_override),
                      st.sampled_from(["", "10.3", "gfx1030", "11.0.x", "1O.3.0", "9.0.0 "]))


@dense
@given(archs)
def test_arch_spellings_round_trip(arch: str) -> None:
    assert gfx.from_override(gfx.to_override(arch)) == arch
    digits = arch[3:]
    kfd = int(digits[:-2]) * 10000 + int(digits[-2], 16) * 100 + int(digits[-1], 16)
    assert gfx.from_target_version(kfd) == arch == gfx.normalize(str(kfd))
    assert gfx.normalize(f"amdgcn-amd-amdhsa--{arch}:sramecc+:xnack-") == arch
    # rocm-smi's decimal stepping: 9.0.10 -> "gfx9010"
    smi = f"gfx{kfd // 10000}{kfd // 100 % 100}{kfd % 100}"
    assert gfx.normalize(smi) == arch


@dense
@given(archs, build_lists)
def test_without_override_ok_iff_the_build_has_the_arch(dev: str, built: list[str]) -> None:
    v = gfx.check_amd(dev, built, None)
    assert v.blocking == (dev not in built)
    assert v.status == ("ok" if dev in built else "no-binary")
    assert v.effective_arch == dev


@dense
@given(archs, build_lists, overrides)
def test_decision_table(dev: str, built: list[str], override: str | None) -> None:
    v = gfx.check_amd(dev, built, override)
    target = gfx.from_override(override) if override and override.strip() else None
    if override and override.strip() and target is None:
        assert v.status == "bad-override" and v.blocking  # malformed: the runtime would ignore or misread it
        return
    if target is not None and not gfx.same_isa(dev, target):
        # Another family: the seed's 9.0.0 on gfx90a. Always blocking, whatever the build has.
        assert v.status == "bad-override" and v.blocking and v.effective_arch == target
        assert v.fix.startswith("unset HSA_OVERRIDE_GFX_VERSION")
        return
    effective = target or dev
    assert v.effective_arch == effective
    assert v.blocking == (effective not in built)
    if target is not None and target != dev:
        assert any("unsupported" in n for n in v.notes)  # recorded, never silent
        assert v.status in ("ok-override", "no-binary")


@dense
@given(archs, build_lists)
def test_suggested_override_is_in_family_and_in_the_build(dev: str, built: list[str]) -> None:
    v = gfx.check_amd(dev, built, None)
    if "HSA_OVERRIDE_GFX_VERSION=" not in v.fix:
        return
    value = v.fix.split("HSA_OVERRIDE_GFX_VERSION=")[1].split()[0]
    target = gfx.from_override(value)
    assert target in built and target != dev and gfx.same_isa(dev, target)
    assert dev not in gfx.DATACENTER  # an Instinct part is never told to use an override
    # and following the advice turns the verdict into a (marked) pass
    after = gfx.check_amd(dev, built, value)
    assert after.status == "ok-override" and not after.blocking


@dense
@given(archs, build_lists)
def test_a_datacenter_part_is_never_offered_an_override(dev: str, built: list[str]) -> None:
    if dev in gfx.DATACENTER:
        assert "HSA_OVERRIDE_GFX_VERSION=" not in gfx.check_amd(dev, built, None).fix


@dense
@given(archs)
def test_unknown_build_list_is_never_blocking_without_override(dev: str) -> None:
    v = gfx.check_amd(dev, None, None)
    assert v.status == "unknown" and not v.blocking


sm = st.tuples(st.integers(3, 12), st.integers(0, 9))
sm_lists = st.lists(st.tuples(st.sampled_from(["sm", "compute"]), st.integers(3, 12), st.integers(0, 9)),
                    max_size=8)


@dense
@given(sm, sm_lists)
def test_nvidia_ok_iff_a_cubin_of_the_major_with_lower_minor(dev: tuple[int, int], built: list) -> None:
    names = [f"{k}_{M}{m}" for k, M, m in built]
    v = gfx.check_nvidia(dev[0], dev[1], names)
    runs = any(k == "sm" and M == dev[0] and m <= dev[1] for k, M, m in built)
    assert (v.status == "ok") == runs and v.blocking == (not runs)
