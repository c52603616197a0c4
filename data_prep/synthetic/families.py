"""The registry of workflow families: 8 families across 4 domains (finance, exec-ops, security, sre)."""

from __future__ import annotations

from data_prep.synthetic.fam_exec_ops import ExecutiveCalendarRecovery, TravelRebooking
from data_prep.synthetic.fam_finance import ExpenseReimbursementAudit, ProcurementPaymentChange
from data_prep.synthetic.fam_security import AccessRequestProvisioning, VendorSecurityReview
from data_prep.synthetic.fam_sre import DeployRollbackReview, ProductionOutageCoordination
from data_prep.synthetic.world import Family

FAMILY_CLASSES: tuple[type[Family], ...] = (
    ProcurementPaymentChange,
    ExpenseReimbursementAudit,
    ExecutiveCalendarRecovery,
    TravelRebooking,
    VendorSecurityReview,
    AccessRequestProvisioning,
    ProductionOutageCoordination,
    DeployRollbackReview,
)
FAMILY_REGISTRY: dict[str, Family] = {cls.name: cls() for cls in FAMILY_CLASSES}
