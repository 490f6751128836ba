from pathlib import Path

DATA = Path(__file__).parent / "data"
SHARED = Path(__file__).resolve().parents[2] / "shared"
