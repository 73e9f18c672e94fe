// What a Go service does with cdcview's DynamoDB endpoint: the AWS SDK for Go v2
// (github.com/aws/aws-sdk-go-v2/service/dynamodb) with only the endpoint set, on the bundled
// sample's table App. Prints one JSON object per line, each named by "op", in the shape the Java
// client prints (tests/integration/sdk/java); tests/integration/test_dynamodb_sdks.py sends the
// same requests with boto3 and compares the answers.
//
//	go build -o dynamodb-go-client . && ./dynamodb-go-client URL
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

const (
	table   = "App"
	applied = "x-cdcview-applied-position"
)

type obj = map[string]any
type item = map[string]types.AttributeValue

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dynamodb-go-client ENDPOINT_URL (cdcviewd's server.dynamodb)")
		os.Exit(2)
	}
	ddb := dynamodb.New(dynamodb.Options{
		BaseEndpoint: aws.String(os.Args[1]),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("any", "any", ""),
	})
	if err := run(context.Background(), ddb); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, ddb *dynamodb.Client) error {
	tables, err := ddb.ListTables(ctx, &dynamodb.ListTablesInput{})
	if err != nil {
		return err
	}
	print(obj{"op": "ListTables", "TableNames": tables.TableNames})

	described, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return err
	}
	indexes := obj{}
	for _, g := range described.Table.GlobalSecondaryIndexes {
		indexes[*g.IndexName] = obj{"KeySchema": keySchema(g.KeySchema),
			"ProjectionType": string(g.Projection.ProjectionType), "IndexStatus": string(g.IndexStatus),
			"ItemCount": *g.ItemCount}
	}
	print(obj{"op": "DescribeTable", "TableName": *described.Table.TableName,
		"KeySchema": keySchema(described.Table.KeySchema), "Indexes": indexes})

	// The README's access pattern, a page of two at a time through the SDK's own paginator.
	pending := func() *dynamodb.QueryInput {
		return &dynamodb.QueryInput{TableName: aws.String(table), IndexName: aws.String("GSI1"),
			KeyConditionExpression:    aws.String("GSI1PK = :pk AND begins_with(GSI1SK, :day)"),
			ExpressionAttributeValues: item{":pk": s("STATUS#PENDING"), ":day": s("2025-03-05")},
			ProjectionExpression:      aws.String("PK, SK, GSI1SK, #t"),
			ExpressionAttributeNames:  map[string]string{"#t": "total"}}
	}
	paged, pages := []any{}, 0
	input := pending()
	input.Limit = aws.Int32(2)
	for p := dynamodb.NewQueryPaginator(ddb, input); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		pages++
		paged = append(paged, items(page.Items)...)
	}
	print(obj{"op": "QueryPaged", "Items": paged, "Pages": pages})

	// Newest first, one page of three by hand, then the next from its LastEvaluatedKey.
	newest := func() *dynamodb.QueryInput {
		return &dynamodb.QueryInput{TableName: aws.String(table), IndexName: aws.String("GSI1"),
			KeyConditionExpression:    aws.String("GSI1PK = :pk"),
			ExpressionAttributeValues: item{":pk": s("STATUS#PENDING")},
			ScanIndexForward:          aws.Bool(false), Limit: aws.Int32(3)}
	}
	first, err := ddb.Query(ctx, newest())
	if err != nil {
		return err
	}
	print(obj{"op": "QueryFirstPage", "Items": items(first.Items), "LastEvaluatedKey": attrs(first.LastEvaluatedKey)})
	input = newest()
	input.ExclusiveStartKey = first.LastEvaluatedKey
	second, err := ddb.Query(ctx, input)
	if err != nil {
		return err
	}
	print(obj{"op": "QuerySecondPage", "Items": items(second.Items), "LastEvaluatedKey": attrs(second.LastEvaluatedKey)})

	// Every attribute of an index that projects them all.
	input = newest()
	input.Select, input.Limit = types.SelectAllAttributes, aws.Int32(2)
	whole, err := ddb.Query(ctx, input)
	if err != nil {
		return err
	}
	print(obj{"op": "QueryAllAttributes", "Items": items(whole.Items)})

	// A filter counted: Limit is applied before it, as DynamoDB does.
	counted, err := ddb.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(table), IndexName: aws.String("GSI1"),
		KeyConditionExpression: aws.String("GSI1PK = :pk"), FilterExpression: aws.String("#t > :min"),
		ExpressionAttributeNames:  map[string]string{"#t": "total"},
		ExpressionAttributeValues: item{":pk": s("STATUS#PENDING"), ":min": &types.AttributeValueMemberN{Value: "500"}},
		Select:                    types.SelectCount, Limit: aws.Int32(40)})
	if err != nil {
		return err
	}
	print(obj{"op": "QueryCount", "Count": counted.Count, "ScannedCount": counted.ScannedCount})

	// The base table: one item, then two in one batch.
	key := item{"PK": first.Items[0]["PK"], "SK": first.Items[0]["SK"]}
	other := item{"PK": first.Items[1]["PK"], "SK": first.Items[1]["SK"]}
	got, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key,
		ProjectionExpression:     aws.String("PK, SK, GSI1SK, #s"),
		ExpressionAttributeNames: map[string]string{"#s": "status"}})
	if err != nil {
		return err
	}
	print(obj{"op": "GetItem", "Item": attrs(got.Item)})
	batch, err := ddb.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
		table: {Keys: []item{key, other}, ProjectionExpression: aws.String("PK, SK, GSI1SK")}}})
	if err != nil {
		return err
	}
	print(obj{"op": "BatchGetItem", "Items": items(batch.Responses[table]), "Unprocessed": len(batch.UnprocessedKeys)})

	// A parallel scan of the index, two segments, pages of 50: each segment's items in order.
	segments := []any{}
	for segment := int32(0); segment < 2; segment++ {
		inSegment := []any{}
		p := dynamodb.NewScanPaginator(ddb, &dynamodb.ScanInput{TableName: aws.String(table),
			IndexName: aws.String("GSI1"), Segment: aws.Int32(segment), TotalSegments: aws.Int32(2),
			Limit: aws.Int32(50)})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return err
			}
			inSegment = append(inSegment, items(page.Items)...)
		}
		segments = append(segments, inSegment)
	}
	print(obj{"op": "ScanSegments", "Segments": segments})

	// Read-your-writes: the applied position of one answer sent back as the next one's minimum.
	withToken, err := ddb.Query(ctx, pending())
	if err != nil {
		return err
	}
	position := ""
	if raw, ok := awsmiddleware.GetRawResponse(withToken.ResultMetadata).(*smithyhttp.Response); ok {
		position = raw.Header.Get(applied)
	}
	waited, err := ddb.Query(ctx, pending(), dynamodb.WithAPIOptions(
		smithyhttp.SetHeaderValue("x-cdcview-min-position", position)))
	if err != nil {
		return err
	}
	print(obj{"op": "MinPosition", "Applied": position, "Count": waited.Count})

	// Errors, as smithy.APIError with DynamoDB's code and message, and the HTTP status.
	consistent := &dynamodb.QueryInput{TableName: aws.String(table), IndexName: aws.String("GSI1"),
		KeyConditionExpression: aws.String("GSI1PK = :pk"), ConsistentRead: aws.Bool(true),
		ExpressionAttributeValues: item{":pk": s("STATUS#PENDING")}}
	fail("ConsistentReadOnIndex", func() error { _, err := ddb.Query(ctx, consistent); return err })
	fail("UnknownTable", func() error {
		_, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("Nope")})
		return err
	})
	fail("PutItem", func() error {
		_, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: key})
		return err
	})
	fail("BadMinPosition", func() error {
		_, err := ddb.Query(ctx, pending(), dynamodb.WithAPIOptions(
			smithyhttp.SetHeaderValue("x-cdcview-min-position", "not-a-token")))
		return err
	})
	return nil
}

func fail(name string, call func() error) {
	err := call()
	var apiErr smithy.APIError
	var response *awshttp.ResponseError
	if err == nil || !errors.As(err, &apiErr) || !errors.As(err, &response) {
		print(obj{"op": "Error:" + name, "Code": fmt.Sprintf("(not an API error: %v)", err)})
		return
	}
	print(obj{"op": "Error:" + name, "Code": apiErr.ErrorCode(), "Message": apiErr.ErrorMessage(),
		"Status": response.HTTPStatusCode()})
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func keySchema(schema []types.KeySchemaElement) []any {
	out := []any{}
	for _, k := range schema {
		out = append(out, []any{*k.AttributeName, string(k.KeyType)})
	}
	return out
}

func items(list []item) []any {
	out := []any{}
	for _, i := range list {
		out = append(out, attrs(i))
	}
	return out
}

// An item (or key) in DynamoDB's JSON, as boto3's low-level client returns it.
func attrs(i item) obj {
	out := obj{}
	for k, v := range i {
		out[k] = value(v)
	}
	return out
}

func value(v types.AttributeValue) obj {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return obj{"S": v.Value}
	case *types.AttributeValueMemberN:
		return obj{"N": v.Value}
	case *types.AttributeValueMemberB:
		return obj{"B": base64.StdEncoding.EncodeToString(v.Value)}
	case *types.AttributeValueMemberBOOL:
		return obj{"BOOL": v.Value}
	case *types.AttributeValueMemberNULL:
		return obj{"NULL": v.Value}
	case *types.AttributeValueMemberSS:
		return obj{"SS": v.Value}
	case *types.AttributeValueMemberNS:
		return obj{"NS": v.Value}
	case *types.AttributeValueMemberBS:
		out := []string{}
		for _, b := range v.Value {
			out = append(out, base64.StdEncoding.EncodeToString(b))
		}
		return obj{"BS": out}
	case *types.AttributeValueMemberL:
		out := []any{}
		for _, e := range v.Value {
			out = append(out, value(e))
		}
		return obj{"L": out}
	case *types.AttributeValueMemberM:
		return obj{"M": attrs(v.Value)}
	}
	panic(fmt.Sprintf("an attribute value of unknown type: %T", v))
}

func print(o obj) {
	line, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(line))
}
