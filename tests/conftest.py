"""Test-wide settings."""
import torch

# The models under test are made of many small operations: on a 2-core machine a
# second intra-op thread only adds contention (a learning check ran 3x slower).
torch.set_num_threads(1)
