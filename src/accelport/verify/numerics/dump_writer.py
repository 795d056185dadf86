"""Where a capture's records go: the run folder, its header, the step and end records, and the
flushes that fill in device statistics and append records to the manifest (dumpfile.py)."""

from __future__ import annotations

import datetime as _dt
import os
import sys
from typing import Any

from accelport.errors import UserError
from accelport.verify.numerics import dumpfile
from accelport.verify.numerics.dump_ops import _json_stats, _rng_crc


class CaptureWriter:
    """The part of Capture (dump.py) that writes the run folder; its state lives on the capture."""

    def _open(self) -> None:
        if self._opened:
            return
        self._opened = True
        folder = self.folder
        if folder.exists() and not folder.is_dir():
            raise UserError(f"{folder}: is a file, not a folder; dump into a new folder")
        if folder.exists() and any(p.is_file() for p in folder.iterdir()):
            raise UserError(f"{folder}: folder is not empty; dump into a new folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"{folder}: cannot create the dump folder ({exc.strerror or exc}); choose another") from None
        self._manifest = dumpfile.ManifestWriter(folder)
        if self.tensors:
            self._store = dumpfile.TensorStore(folder)
        self._manifest.write(self._header())
        self._manifest.flush()

    def _header(self) -> dict[str, Any]:
        torch = self._torch
        from accelport.runtime.environment import describe_machine

        determinism = {
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "cuda_matmul_allow_tf32": bool(
                getattr(torch.backends.cuda.matmul, "allow_tf32", False)
            ),
        }
        env_vars = {
            k: v
            for k, v in os.environ.items()
            if k
            in (
                "CUBLAS_WORKSPACE_CONFIG",
                "PYTHONHASHSEED",
                "OMP_NUM_THREADS",
                "RANK",
                "WORLD_SIZE",
                "LOCAL_RANK",
            )
            or k.endswith("_VISIBLE_DEVICES")
        }
        return {
            "k": "header",
            "format": dumpfile.FORMAT,
            "version": dumpfile.VERSION,
            "created": _now(),
            "mode": "tensors" if self.tensors else "statistics",
            "stat_fields": list(dumpfile.STAT_FIELDS),
            "checksums": self.checksums,
            "views": self.views,
            "recorder": self.recorder,
            "steps": [self.first_step, self.last_step],
            "phases": sorted(self.phases),
            "filters": {
                "modules": list(self.module_filters),
                "ops": list(self.op_filters),
                "tensor_modules": list(self.tensor_module_filters),
                "tensor_ops": list(self.tensor_op_filters),
            },
            "argv": list(sys.argv),
            "pid": os.getpid(),
            "machine": describe_machine(),
            "dtype_policy": {"default_dtype": str(torch.get_default_dtype()).replace("torch.", "")},
            "determinism": determinism,
            "seeds": {"torch_initial_seed": torch.initial_seed()},
            "env": env_vars,
        }

    def _emit(self, record: dict[str, Any], tensor_count: int) -> None:
        self._records.append(record)
        self._waiting_tensors += tensor_count
        if self._waiting_tensors >= self.flush_every:
            self._flush()

    def _flush(self) -> None:
        if not self._opened or self._manifest is None:
            return
        assert self._stats is not None
        resolved = self._stats.resolve()
        if resolved:
            # Tensors measured in this batch may be used again after the flush (as inputs,
            # or through views): their cached entries must carry the numbers, not an index
            # into a batch that is about to be emptied.
            for _ref, _version, entry in self._cache.values():
                if isinstance(entry.stats, int):
                    entry.stats = resolved[entry.stats]
        # Host statistics went into their descriptions JSON-ready (_json_stats); device ones
        # are filled in now, in the descriptions that hold their index (each listed once).
        for desc in self._unresolved:
            desc["stats"] = _json_stats(resolved[desc["stats"]])
        self._unresolved = []
        if self._random:
            for record in self._records:
                drawn = self._random.pop(record.get("seq"), None) if record.get("k") == "op" else None
                if drawn is not None:
                    record["random"] = drawn
        self._manifest.write_many(self._records)
        self.records_written += len(self._records)
        self._records = []
        self._waiting_tensors = 0
        if self._store is not None:
            self._store.flush()
        self._manifest.flush()

    def _record_step_start(self) -> None:
        torch = self._torch
        amp = {}
        for device in ("cpu", "cuda", "xpu", "npu", "mlu", "musa", "hpu"):
            try:
                if torch.is_autocast_enabled(device):
                    amp[device] = str(torch.get_autocast_dtype(device)).replace("torch.", "")
            except (RuntimeError, AttributeError, TypeError):
                continue
        self._open()
        self._emit(
            {"k": "step", "step": self.current_step, "autocast": amp, "rng_crc32": _rng_crc(torch)},
            0,
        )

    def _write_end(self) -> None:
        """Flush what is left and write the end record that marks the dump complete."""
        self._flush()
        assert self._manifest is not None
        # records: lines between the header and this one, so a reader can tell a complete dump.
        self._manifest.write(
            {
                "k": "end",
                "records": self._manifest.records - 1,
                "steps": self.current_step + 1,
                "closed": _now(),
            }
        )
        if self._store is not None:
            self._store.close()
        self._manifest.close()


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")

