"""``python -m mesh_bridge`` is the same as ``mesh-bridge``."""

from mesh_bridge.cli import main

if __name__ == "__main__":
    main()
