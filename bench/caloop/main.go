// caloop drives allset the way Cluster Autoscaler's Go client does: one CA-loop pass is
// Refresh, NodeGroups, then TargetSize, Nodes and GetOptions for every group, one call
// after another. It prints JSON figures for bench/ca_loop.py.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "allset.dev/bench/caloop/gen"
)

type result struct {
	PassSeconds    []float64          `json:"passSeconds"`
	Calls          int                `json:"callsPerPass"`
	ReadP50Ms      map[string]float64 `json:"readP50Ms"`
	ReadP99Ms      map[string]float64 `json:"readP99Ms"`
	IncreaseP50Ms  float64            `json:"increaseP50Ms"`
	IncreaseP99Ms  float64            `json:"increaseP99Ms"`
	IncreaseCalled int                `json:"increaseCalls"`
}

func pct(samples []time.Duration, p float64) float64 {
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	idx := int(p*float64(len(s)-1) + 0.5)
	return float64(s[idx].Microseconds()) / 1000
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8086", "allset address")
	passes := flag.Int("passes", 5, "CA-loop passes")
	increases := flag.Int("increases", 500, "IncreaseSize calls (delta 1, distinct groups)")
	flag.Parse()

	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	c := pb.NewCloudProviderClient(conn)
	ctx := context.Background()
	groups, err := c.NodeGroups(ctx, &pb.NodeGroupsRequest{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defaults := &pb.NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold:    0.5,
		ScaleDownGpuUtilizationThreshold: 0.5,
		ScaleDownUnneededDuration:        durationpb.New(10 * time.Minute),
		ScaleDownUnreadyDuration:         durationpb.New(20 * time.Minute),
		MaxNodeProvisionDuration:         durationpb.New(15 * time.Minute),
	}
	ids := make([]string, 0, len(groups.NodeGroups))
	for _, g := range groups.NodeGroups {
		ids = append(ids, g.Id)
	}
	must := func(err error) {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	res := result{Calls: 2 + 3*len(ids), ReadP50Ms: map[string]float64{}, ReadP99Ms: map[string]float64{}}
	reads := map[string][]time.Duration{}
	for p := 0; p < *passes+1; p++ { // the first pass warms up
		start := time.Now()
		_, err := c.Refresh(ctx, &pb.RefreshRequest{})
		must(err)
		_, err = c.NodeGroups(ctx, &pb.NodeGroupsRequest{})
		must(err)
		for _, id := range ids {
			t := time.Now()
			_, err = c.NodeGroupTargetSize(ctx, &pb.NodeGroupTargetSizeRequest{Id: id})
			must(err)
			reads["NodeGroupTargetSize"] = append(reads["NodeGroupTargetSize"], time.Since(t))
			t = time.Now()
			_, err = c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: id})
			must(err)
			reads["NodeGroupNodes"] = append(reads["NodeGroupNodes"], time.Since(t))
			t = time.Now()
			_, err = c.NodeGroupGetOptions(ctx, &pb.NodeGroupAutoscalingOptionsRequest{Id: id, Defaults: defaults})
			must(err)
			reads["NodeGroupGetOptions"] = append(reads["NodeGroupGetOptions"], time.Since(t))
		}
		if p > 0 {
			res.PassSeconds = append(res.PassSeconds, time.Since(start).Seconds())
		}
	}
	for name, s := range reads {
		res.ReadP50Ms[name] = pct(s, 0.5)
		res.ReadP99Ms[name] = pct(s, 0.99)
	}
	var acks []time.Duration
	for i := 0; i < *increases && i < len(ids); i++ {
		t := time.Now()
		_, err := c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: ids[i], Delta: 1})
		must(err)
		acks = append(acks, time.Since(t))
	}
	if len(acks) > 0 {
		res.IncreaseP50Ms, res.IncreaseP99Ms, res.IncreaseCalled = pct(acks, 0.5), pct(acks, 0.99), len(acks)
	}
	must(json.NewEncoder(os.Stdout).Encode(res))
}
