"""The mesh workload's model and data, on PyTorch Geometric: a MeshGraphNets-style simulator
(encode, process with blocks that update every edge and then every node, decode) written on PyG's
MessagePassing as its users write one, and the step's batch of triangulated grid meshes collated by
PyG's own Batch on the host and moved to the GPU, as a DataLoader hands it over. Imported only by
workloads.MeshGraphNetTraining, so the other workloads need no PyG.
"""

import torch
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import MessagePassing


def _mlp(inputs, hidden, outputs, norm=True):
    """MeshGraphNets' MLP: two hidden ReLU layers, a LayerNorm on the output but for the decoder's."""
    layers = [nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, outputs)]
    if norm:
        layers.append(nn.LayerNorm(outputs))
    return nn.Sequential(*layers)


class GraphNetBlock(MessagePassing):
    """One processor block: each edge updated from itself and its two nodes, then each node from
    itself and the sum of its incoming edges' updates; both residual."""

    def __init__(self, hidden):
        super().__init__(aggr="sum")
        self.edge_mlp = _mlp(3 * hidden, hidden, hidden)
        self.node_mlp = _mlp(2 * hidden, hidden, hidden)
        self._edges = None

    def forward(self, x, edge_index, edge_attr):
        incoming = self.propagate(edge_index, x=x, edge_attr=edge_attr)
        # message() kept the updated edges: the block returns them beside the nodes.
        edges, self._edges = self._edges, None
        return x + self.node_mlp(torch.cat([x, incoming], dim=-1)), edges

    def message(self, x_i, x_j, edge_attr):
        self._edges = edge_attr + self.edge_mlp(torch.cat([edge_attr, x_i, x_j], dim=-1))
        return self._edges


class MeshGraphNet(nn.Module):
    """Encoder, `size.blocks` GraphNetBlocks, decoder (catalog.MeshGraphNetSize)."""

    def __init__(self, size):
        super().__init__()
        self.node_encoder = _mlp(size.node_features, size.hidden, size.hidden)
        self.edge_encoder = _mlp(size.edge_features, size.hidden, size.hidden)
        self.blocks = nn.ModuleList(GraphNetBlock(size.hidden) for _ in range(size.blocks))
        self.decoder = _mlp(size.hidden, size.hidden, size.outputs, norm=False)

    def forward(self, x, edge_index, edge_attr):
        x, edges = self.node_encoder(x), self.edge_encoder(edge_attr)
        for block in self.blocks:
            x, edges = block(x, edge_index, edges)
        return self.decoder(x)


def grid_mesh(rows, columns, size, generator):
    """A triangulated grid of `rows` x `columns` nodes on the unit square, jittered, as a PyG Data:
    node features and targets drawn from `generator`, each triangle edge in both directions, edge
    features the relative position and its length (MeshGraphNets' mesh-space edges)."""
    ids = torch.arange(rows * columns).view(rows, columns)
    pairs = [(ids[:, :-1], ids[:, 1:]), (ids[:-1, :], ids[1:, :]), (ids[:-1, :-1], ids[1:, 1:])]
    one_way = torch.cat([torch.stack([a.reshape(-1), b.reshape(-1)]) for a, b in pairs], dim=1)
    edge_index = torch.cat([one_way, one_way.flip(0)], dim=1)
    r, c = torch.meshgrid(torch.arange(rows), torch.arange(columns), indexing="ij")
    spacing = 1.0 / max(rows, columns)
    pos = torch.stack([c, r], dim=-1).reshape(-1, 2).float() * spacing
    pos += 0.2 * spacing * torch.rand(pos.shape, generator=generator)
    relative = pos[edge_index[0]] - pos[edge_index[1]]
    edge_attr = torch.cat([relative, relative.norm(dim=1, keepdim=True)], dim=1)
    x = torch.randn(rows * columns, size.node_features, generator=generator)
    y = torch.randn(rows * columns, size.outputs, generator=generator)
    return Data(x=x, edge_index=edge_index, edge_attr=edge_attr, y=y, pos=pos)


def mesh_batch(grids, size, seed):
    """The step's meshes ((rows, columns) pairs) collated by PyG's Batch and moved to the GPU; the
    same under every allocator for the same `seed`."""
    generator = torch.Generator().manual_seed(seed)
    meshes = [grid_mesh(rows, columns, size, generator) for rows, columns in grids]
    return Batch.from_data_list(meshes).to("cuda", non_blocking=True)
