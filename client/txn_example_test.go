package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sluicemq/sluice/client"
)

// Write records to two topics in one transaction: read-committed
// consumers see both or neither.
func ExampleTransactionalProducer() {
	ctx := context.Background()
	mustCreateTopic("payments", 1)
	mustCreateTopic("ledger", 1)
	c, err := client.New(ctx, endpoint, client.APIKey(apiKey))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	tp, err := c.NewTransactionalProducer(ctx, "payments-writer")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tp.Close(ctx)
	write := func(commit bool, id string) error {
		if err := tp.Begin(); err != nil {
			return err
		}
		tp.Produce(ctx, &client.Record{Topic: "payments", Value: []byte(id)}, nil)
		tp.Produce(ctx, &client.Record{Topic: "ledger", Value: []byte("debit " + id)}, nil)
		if !commit {
			return tp.Abort(ctx)
		}
		err := tp.Commit(ctx)
		if errors.Is(err, client.ErrTransactionAbortable) {
			return errors.Join(err, tp.Abort(ctx)) // run it again, or give up
		}
		return err // nil, or fatal: ErrProducerFenced
	}
	if err := write(true, "p-1"); err != nil {
		fmt.Println(err)
		return
	}
	if err := write(false, "p-2"); err != nil { // changed our mind
		fmt.Println(err)
		return
	}

	cs, _ := c.NewConsumer(client.WithIsolation(client.ReadCommitted))
	defer cs.Close()
	_ = cs.AssignUntil(ctx, "payments", 0, client.Earliest(), client.Latest())
	_ = cs.AssignUntil(ctx, "ledger", 0, client.Earliest(), client.Latest())
	for {
		recs, err := cs.Poll(ctx)
		if err == io.EOF {
			break
		}
		for _, r := range recs {
			fmt.Printf("%s: %s\n", r.Topic, r.Value)
		}
	}
	// Unordered output:
	// payments: p-1
	// ledger: debit p-1
}

// Read a topic, write each record transformed to another, and commit the
// input offsets in the same transaction: exactly once inside Sluice.
func ExampleConsumeTransformProduce() {
	ctx := context.Background()
	mustCreateTopic("words", 2)
	mustCreateTopic("shouted", 2)
	c, err := client.New(ctx, endpoint, client.APIKey(apiKey))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	p, _ := c.NewProducer(ctx)
	for _, w := range []string{"alpha", "beta", "gamma"} {
		_ = p.ProduceSync(ctx, &client.Record{Topic: "words", Key: []byte(w), Value: []byte(w)})
	}
	_ = p.Close(ctx)

	g, err := c.NewGroupConsumer(ctx, "shouter", []string{"words"}, client.WithCommitMode(client.CommitTransactional()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close(ctx)
	tp, err := c.NewTransactionalProducer(ctx, "shouter-0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tp.Close(ctx)

	// The loop runs until its ctx ends: here, once a read-committed
	// reader of the output has seen every word.
	run, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- client.ConsumeTransformProduce(run, g, tp, func(_ context.Context, r *client.Record) ([]*client.Record, error) {
			return []*client.Record{{Topic: "shouted", Key: r.Key, Value: bytes.ToUpper(r.Value)}}, nil
		})
	}()

	cs, _ := c.NewConsumer(client.WithIsolation(client.ReadCommitted))
	defer cs.Close()
	for part := range int32(2) {
		_ = cs.Assign(ctx, "shouted", part, client.Earliest())
	}
	for got := 0; got < 3; {
		recs, err := cs.Poll(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, r := range recs {
			fmt.Println(string(r.Value))
			got++
		}
	}
	stop()
	if err := <-done; err != nil {
		fmt.Println(err)
	}
	// Unordered output:
	// ALPHA
	// BETA
	// GAMMA
}
