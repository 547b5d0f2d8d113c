"""Every ORM table, imported in one place so Alembic sees the whole schema."""

from service.catalog.orm import GpuEntry, ModelEntry
from service.db.base import Base
from service.deployments.orm import DeploymentEntry
from service.planning.calibration_store import CalibrationEntry
from service.planning.step_time_calibration import StepTimeCalibrationEntry

metadata = Base.metadata

__all__ = [
    "Base",
    "CalibrationEntry",
    "DeploymentEntry",
    "GpuEntry",
    "ModelEntry",
    "StepTimeCalibrationEntry",
    "metadata",
]
