"""accelport.compat on the CPU: device detection, the visible-devices variable, bf16, event timing."""

from __future__ import annotations

import time

import pytest
import torch

import accelport.compat as compat


def test_device_is_the_cpu_without_an_accelerator():
    assert compat.device() == torch.device("cpu")


def test_cpu_event_times_with_the_wall_clock():
    start, end = compat.Event(enable_timing=True), compat.Event("cpu", enable_timing=True)
    assert isinstance(start, compat.CpuEvent)
    start.record()
    time.sleep(0.05)
    end.record()
    end.synchronize()
    assert end.query()
    # Milliseconds, like torch.Event: a 50 ms sleep never ends early (no upper bound: a loaded machine may take any time).
    assert start.elapsed_time(end) >= 49.0


def test_cpu_event_refuses_what_torch_event_refuses():
    plain, timed = compat.Event(), compat.Event(enable_timing=True)
    plain.record()
    timed.record()
    with pytest.raises(RuntimeError, match="enable_timing"):
        plain.elapsed_time(timed)
    with pytest.raises(RuntimeError, match="recorded"):
        compat.Event(enable_timing=True).elapsed_time(timed)


@pytest.mark.parametrize(
    ("device_type", "variable"),
    [
        ("cpu", "CUDA_VISIBLE_DEVICES"),
        ("cuda", "CUDA_VISIBLE_DEVICES"),
        ("npu", "ASCEND_RT_VISIBLE_DEVICES"),
        ("xpu", "ZE_AFFINITY_MASK"),
        ("musa", "MUSA_VISIBLE_DEVICES"),
        ("mlu", "MLU_VISIBLE_DEVICES"),
        ("mps", "CUDA_VISIBLE_DEVICES"),
    ],
)
def test_visible_devices_variable_per_vendor(device_type, variable):
    assert compat.visible_devices_var(device_type) == variable


def test_visible_devices_variable_defaults_to_this_machine():
    assert compat.visible_devices_var() == "CUDA_VISIBLE_DEVICES"


def test_bf16_on_the_cpu():
    assert compat.is_bf16_supported() is True
    assert compat.is_bf16_supported("cpu") is True


def test_compat_is_importable_as_documented():
    import accelport.runtime.compat as implementation

    assert compat.Event is implementation.Event
    assert set(compat.__all__) == {
        "CpuEvent", "CpuStream", "Event", "backfill", "current_stream", "device", "is_bf16_supported", "visible_devices_var",
    }


def test_backfill_does_nothing_on_a_torch_that_has_the_apis():
    assert compat.backfill() == []


def test_accelerator_backfill_behaves_like_torch_accelerator_without_an_accelerator():
    from accelport.runtime.compat import accelerator_backfill

    stand_in = accelerator_backfill(torch)
    assert stand_in.is_available() is torch.accelerator.is_available() is False
    assert stand_in.current_accelerator() is torch.accelerator.current_accelerator() is None
    assert stand_in.device_count() == torch.accelerator.device_count() == 0
    for name in ("synchronize", "memory_allocated", "set_device_index", "get_memory_info"):
        with pytest.raises(RuntimeError, match="none is available"):
            getattr(torch.accelerator, name)() if name != "set_device_index" else torch.accelerator.set_device_index(0)
        with pytest.raises(RuntimeError, match="none is available"):
            getattr(stand_in, name)() if name != "set_device_index" else stand_in.set_device_index(0)
    with stand_in.device_index(None):
        pass
    # Migrated code's device line works on it as on torch 2.13.
    assert (stand_in.current_accelerator() or torch.device("cpu")) == torch.device("cpu")


def test_current_stream_on_the_cpu_waits_at_once():
    stream = compat.current_stream()
    assert isinstance(stream, compat.CpuStream)
    assert compat.current_stream("cpu").device == torch.device("cpu")
    side = torch.Stream("cpu")  # what migrate writes for torch.cuda.Stream()
    with side:
        pass
    stream.wait_stream(side)
    stream.synchronize()
    assert stream.query()
    event = stream.record_event(compat.Event(enable_timing=True))
    stream.wait_event(event)
    assert event.query()
