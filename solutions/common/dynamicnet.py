class DynamicNet(nn.Module):
    """The middle layer is applied 0 to max_depth times, a new draw on every call."""

    def __init__(self, d_in=784, hidden=100, d_out=10, max_depth=3, seed=None):
        super().__init__()
        self.input_linear = nn.Linear(d_in, hidden)
        self.middle_linear = nn.Linear(hidden, hidden)
        self.output_linear = nn.Linear(hidden, d_out)
        self.max_depth = max_depth
        self.rng = random.Random(seed)
        self.last_depth = None

    def forward(self, x, depth=None):
        ### BEGIN SOLUTION
        if depth is None:
            depth = self.rng.randint(0, self.max_depth)
        self.last_depth = depth
        h = F.relu(self.input_linear(x.flatten(1)))
        for _ in range(depth):
            h = F.relu(self.middle_linear(h))
        return F.log_softmax(self.output_linear(h), dim=1)  # log-probabilities: nll_loss
        ### END SOLUTION
