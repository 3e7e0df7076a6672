"""`.rlxp` packages (inventory 4.5, docs/format.md): the deploy format that stores every
weight byte once, in a flat file (`RLXPFLAT`), a STORE-only ZIP64 archive or a folder, with
hot (mapped), warm (zstd blocks) and cold (one zstd frame) storage tiers."""

from rlx.artifact.rlxp.layout import CONTAINERS, container_for
from rlx.artifact.rlxp.read import RlxpPackage, is_rlxp, read_rlxp, read_rlxp_package
from rlx.artifact.rlxp.write import RlxpOptions, write_rlxp
from rlx.artifact.rlxp.zblk import TIERS

__all__ = ["CONTAINERS", "TIERS", "RlxpOptions", "RlxpPackage", "container_for", "is_rlxp",
           "read_rlxp", "read_rlxp_package", "write_rlxp"]
